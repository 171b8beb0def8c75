//! The last hour's processed and failed runs per minute, as an SVG bar chart
//! rendered on the server: 61 bars of two rectangles each, no script and no
//! charting library, redrawn with the rest of a live part.

use maud::{Markup, html};
use redjob::backend::MinuteStats;

use crate::fmt::num;

/// The chart's drawing height; bars scale to the top of the axis.
const HEIGHT: u64 = 100;
/// Each minute's slot width (the bar leaves a gap of 2).
const SLOT: u64 = 10;
/// The height of the mark on top of a bar cut at the top of the axis.
const MARK: u64 = 4;

/// The top of the axis for these per-minute totals.
///
/// A linear scale to the busiest minute, unless one or a few minutes are
/// spikes: one minute of 150,049 failures among minutes of about 100 would
/// flatten every other bar to a pixel. So the busiest tenth of the minutes
/// with runs (at least one minute) is set aside, and the busiest minute left
/// is the reference: when the peak is more than 4 times it, the axis stops at
/// twice the reference and taller minutes are cut there, marked, their true
/// figures in their tooltip and the peak in the caption. With fewer than 3
/// minutes with runs there is nothing to compare: the axis is the peak.
/// (Linear rather than a log or square-root scale: bars stay proportional,
/// which is what a glance at a bar chart reads.)
fn axis_top(totals: &[u64]) -> u64 {
    let mut busy: Vec<u64> = totals.iter().copied().filter(|&n| n > 0).collect();
    busy.sort_unstable_by(|a, b| b.cmp(a));
    let peak = busy.first().copied().unwrap_or(0);
    if busy.len() < 3 {
        return peak.max(1);
    }
    let reference = busy[busy.len().div_ceil(10)];
    if peak / 4 > reference {
        reference.saturating_mul(2).max(1)
    } else {
        peak.max(1)
    }
}

/// What a chart's bars are: the last hour's minutes, or the last week's
/// hours.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Span {
    Hour,
    Week,
}

impl Span {
    fn caption(self) -> &'static str {
        match self {
            Span::Hour => "Last hour",
            Span::Week => "Last 7 days",
        }
    }

    fn per(self) -> &'static str {
        match self {
            Span::Hour => "/min",
            Span::Week => "/h",
        }
    }

    fn bars(self) -> &'static str {
        match self {
            Span::Hour => "minutes",
            Span::Week => "hours",
        }
    }

    fn start(self) -> &'static str {
        match self {
            Span::Hour => "60 min ago",
            Span::Week => "7 days ago",
        }
    }
}

/// The chart of `minutes` (oldest first) with its totals above it.
pub(crate) fn chart(minutes: &[MinuteStats]) -> Markup {
    chart_of(minutes, Span::Hour)
}

/// The chart of `points` (oldest first; minutes or hours as `span` says)
/// with their totals above it.
pub(crate) fn chart_of(minutes: &[MinuteStats], span: Span) -> Markup {
    // saturating throughout: the ring is data anyone could have written
    let total = |m: &MinuteStats| m.processed.saturating_add(m.failed);
    let processed = minutes
        .iter()
        .fold(0u64, |a, m| a.saturating_add(m.processed));
    let failed = minutes.iter().fold(0u64, |a, m| a.saturating_add(m.failed));
    let totals: Vec<u64> = minutes.iter().map(total).collect();
    let peak = totals.iter().copied().max().unwrap_or(0);
    let top = axis_top(&totals);
    let width = SLOT * minutes.len() as u64;
    // a bar's height in drawing units: at least 1 for any run, so one shows,
    // at most HEIGHT (above the axis's top it is cut; scaled in u128)
    let h = |n: u64| {
        if n == 0 {
            0
        } else {
            let scaled = (u128::from(n) * u128::from(HEIGHT)).div_ceil(u128::from(top));
            scaled.min(u128::from(HEIGHT)).max(1) as u64
        }
    };
    html! {
        figure.chart {
            figcaption {
                (span.caption()) ": " b.ok { (num(processed)) } " processed · "
                b.bad { (num(failed)) } " failed · peak " (num(peak)) (span.per())
                @if peak > top {
                    span.muted { " · scale cut at " (num(top)) (span.per()) " (taller " (span.bars()) " marked, their figures on hover)" }
                }
            }
            svg viewBox=(format!("0 0 {width} {HEIGHT}")) preserveAspectRatio="none"
                role="img" aria-label=(match span {
                    Span::Hour => "Processed and failed runs per minute over the last hour",
                    Span::Week => "Processed and failed runs per hour over the last 7 days",
                }) {
                @for (i, m) in minutes.iter().enumerate() {
                    @let x = i as u64 * SLOT;
                    @let (hp, hf) = (h(m.processed), h(total(m)) - h(m.processed));
                    g {
                        title { (label(m, span)) }
                        rect.base x=(x) y=(HEIGHT - 1) width=(SLOT - 2) height="1" {}
                        @if hp > 0 {
                            rect.p x=(x) y=(HEIGHT - hp) width=(SLOT - 2) height=(hp) {}
                        }
                        @if hf > 0 {
                            rect.f x=(x) y=(HEIGHT - hp - hf) width=(SLOT - 2) height=(hf) {}
                        }
                        @if total(m) > top {
                            rect.cut x=(x) y="0" width=(SLOT - 2) height=(MARK) {}
                        }
                    }
                }
            }
            div.axis { span { (span.start()) } span { "now" } }
        }
    }
}

/// `14:05 UTC: 120 processed, 3 failed` (a minute), `2026-11-26 14:00 UTC: …`
/// (an hour).
fn label(m: &MinuteStats, span: Span) -> String {
    let at = crate::fmt::when(m.start_ms);
    let hm = match span {
        Span::Hour => at.get(11..16),
        Span::Week => at.get(..16),
    }
    .unwrap_or(&at);
    format!(
        "{hm} UTC: {} processed, {} failed",
        num(m.processed),
        num(m.failed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use redjob::backend::last_hour;

    #[test]
    fn bars_scale_to_the_peak_and_a_single_run_shows() {
        let mut hour = last_hour(60 * 60_000, []);
        hour[10].processed = 1;
        hour[60] = MinuteStats {
            processed: 300,
            failed: 100,
            ..hour[60]
        };
        let svg = chart(&hour).into_string();
        // the peak fills the height: 75 processed under 25 failed
        assert!(
            svg.contains(r#"<rect class="p" x="600" y="25" width="8" height="75">"#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"<rect class="f" x="600" y="0" width="8" height="25">"#),
            "{svg}"
        );
        // one run in 400 still draws one unit
        assert!(
            svg.contains(r#"<rect class="p" x="100" y="99" width="8" height="1">"#),
            "{svg}"
        );
        assert_eq!(svg.matches(r#"class="p""#).count(), 2);
        assert!(svg.contains(r#"<b class="ok">301</b> processed"#), "{svg}");
        assert!(
            svg.contains("01:00 UTC: 300 processed, 100 failed"),
            "{svg}"
        );
        assert!(!svg.contains("cut"), "{svg}");
    }

    /// The heights of the bars of minute `i` (processed, failed) in `svg`.
    fn heights(svg: &str, i: usize) -> (u64, u64) {
        let x = format!(r#" x="{}" "#, i * SLOT as usize);
        let of = |class: &str| {
            let start = format!(r#"<rect class="{class}"{x}"#);
            svg.find(&start).map_or(0, |at| {
                let rest = &svg[at..];
                let h = &rest[rest.find("height=\"").unwrap() + 8..];
                h[..h.find('"').unwrap()].parse().unwrap()
            })
        };
        (of("p"), of("f"))
    }

    #[test]
    fn one_spike_keeps_ordinary_minutes_readable_and_shows_its_value() {
        let mut hour = last_hour(60 * 60_000, []);
        for (i, m) in hour.iter_mut().enumerate() {
            m.processed = 90 + (i as u64 * 7) % 21;
            m.failed = (i as u64) % 3;
        }
        hour[30].failed = 150_049;
        let svg = chart(&hour).into_string();
        for i in (0..61).filter(|&i| i != 30) {
            let (p, f) = heights(&svg, i);
            assert!(p + f > 20, "minute {i}: {p} + {f} of {HEIGHT}: {svg}");
        }
        // the spike: cut at the top, marked, its figure on hover and above
        let (p, f) = heights(&svg, 30);
        assert_eq!(p + f, HEIGHT, "{svg}");
        assert!(svg.contains(r#"<rect class="cut" x="300" y="0""#), "{svg}");
        assert_eq!(svg.matches(r#"class="cut""#).count(), 1);
        assert!(svg.contains("150,049 failed</title>"), "{svg}");
        assert!(svg.contains("peak 150,"), "{svg}");
    }

    #[test]
    fn the_axis_stops_at_twice_the_busiest_ordinary_minute_after_a_spike() {
        assert_eq!(axis_top(&[]), 1);
        assert_eq!(axis_top(&[0, 5, 0]), 5);
        assert_eq!(axis_top(&[100, 120, 400]), 400);
        // 10 % of the minutes set aside: the reference is the second busiest
        assert_eq!(axis_top(&[100, 110, 90, 150_049]), 220);
        let mut busy = vec![100; 57];
        busy.extend([5000, 6000, 7000, 8000]);
        // 61 minutes: the 7 busiest set aside, the reference is 100
        assert_eq!(axis_top(&busy), 200);
    }
}
