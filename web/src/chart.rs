//! The last hour's processed and failed runs per minute, as an SVG bar chart
//! rendered on the server: 61 bars of two rectangles each, no script and no
//! charting library, redrawn with the rest of a live part.

use maud::{Markup, html};
use redjob::backend::MinuteStats;

use crate::fmt::num;

/// The chart's drawing height; bars scale to the busiest minute.
const HEIGHT: u64 = 100;
/// Each minute's slot width (the bar leaves a gap of 2).
const SLOT: u64 = 10;

/// The chart of `minutes` (oldest first) with its totals above it.
pub(crate) fn chart(minutes: &[MinuteStats]) -> Markup {
    // saturating throughout: the ring is data anyone could have written
    let total = |m: &MinuteStats| m.processed.saturating_add(m.failed);
    let processed = minutes
        .iter()
        .fold(0u64, |a, m| a.saturating_add(m.processed));
    let failed = minutes.iter().fold(0u64, |a, m| a.saturating_add(m.failed));
    let peak = minutes.iter().map(total).max().unwrap_or(0);
    let width = SLOT * minutes.len() as u64;
    // a bar's height in drawing units: at least 1 for any run, so one shows
    // (n <= peak, scaled in u128: at most HEIGHT)
    let h = |n: u64| {
        if n == 0 {
            0
        } else {
            let scaled = (u128::from(n) * u128::from(HEIGHT)).div_ceil(u128::from(peak.max(1)));
            (scaled as u64).max(1)
        }
    };
    html! {
        figure.chart {
            figcaption {
                "Last hour: " b.ok { (num(processed)) } " processed · "
                b.bad { (num(failed)) } " failed · peak " (num(peak)) "/min"
            }
            svg viewBox=(format!("0 0 {width} {HEIGHT}")) preserveAspectRatio="none"
                role="img" aria-label="Processed and failed runs per minute over the last hour" {
                @for (i, m) in minutes.iter().enumerate() {
                    @let x = i as u64 * SLOT;
                    @let (hp, hf) = (h(m.processed), h(total(m)) - h(m.processed));
                    g {
                        title { (minute_label(m)) }
                        rect.base x=(x) y=(HEIGHT - 1) width=(SLOT - 2) height="1" {}
                        @if hp > 0 {
                            rect.p x=(x) y=(HEIGHT - hp) width=(SLOT - 2) height=(hp) {}
                        }
                        @if hf > 0 {
                            rect.f x=(x) y=(HEIGHT - hp - hf) width=(SLOT - 2) height=(hf) {}
                        }
                    }
                }
            }
            div.axis { span { "60 min ago" } span { "now" } }
        }
    }
}

/// `14:05 UTC: 120 processed, 3 failed`.
fn minute_label(m: &MinuteStats) -> String {
    let at = crate::fmt::when(m.start_ms);
    let hm = at.get(11..16).unwrap_or(&at);
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
    }
}
