// What the dead letters page looks like at a phone's width, as the browser
// measures it (run by web_browser.rs through WebDriver's execute, which wraps
// it in a function): whether the page fits, the table's wrapper scrolls
// sideways to every column, the error cell (scrolled to) lies on screen, and
// which cell's content overflows it or breaks a word that would fit.
const wrap = document.querySelector('#dead');
const table = wrap.querySelector('table');
const w = wrap.getBoundingClientRect();
const out = {
  fits: document.documentElement.scrollWidth <= window.innerWidth,
  scrolls: ['auto', 'scroll'].includes(getComputedStyle(wrap).overflowX)
    && wrap.scrollWidth > wrap.clientWidth,
  unreachable: [], overflowing: [], broken: [],
};
for (const th of table.querySelectorAll('th')) {
  const r = th.getBoundingClientRect();
  const left = r.left - w.left - wrap.clientLeft + wrap.scrollLeft;
  if (left < -1 || left + r.width > wrap.scrollWidth + 1) out.unreachable.push(th.textContent);
}
for (const cell of table.querySelectorAll('td, th')) {
  if (cell.scrollWidth > cell.clientWidth + 1) out.overflowing.push(cell.className + ': ' + cell.textContent.slice(0, 40));
  const style = getComputedStyle(cell);
  const room = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let t = walker.nextNode(); t; t = walker.nextNode()) {
    for (const m of t.data.matchAll(/\S+/g)) {
      const range = document.createRange();
      range.setStart(t, m.index);
      range.setEnd(t, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      if (lines.size < 2) continue;
      // broken across lines: only a word wider than the cell may be
      const probe = document.createElement('span');
      probe.style.whiteSpace = 'nowrap';
      probe.textContent = m[0];
      t.parentNode.appendChild(probe);
      const width = probe.getBoundingClientRect().width;
      probe.remove();
      if (width <= room + 1) out.broken.push(m[0] + ' (' + Math.round(width) + ' of ' + Math.round(room) + ' px)');
    }
  }
}
const error = table.querySelector('tbody td.error');
error.scrollIntoView({block: 'nearest', inline: 'nearest'});
const e = error.getBoundingClientRect();
out.error_on_screen = e.left >= -1 && e.right <= window.innerWidth + 1;
out.error_width = Math.round(e.width);
return out;
