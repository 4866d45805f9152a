//! `--plot FILE`: the size report as a picture, an SVG drawn with plotters.
//!
//! Without `--compare`: the groups that save the most bytes, one horizontal bar each (the
//! picture of the summary's top list). With `--compare`: every group that changed, two
//! bars each, what it saved in the baseline and what it saves now, under a caption with
//! the change in `.text`. Bars are drawn in a fixed order from the report, and plotters'
//! SVG backend estimates text without fonts, so the same report gives the same file.

use clif_merge::report::compare::{signed_with_percent, Comparison, GroupView};
use clif_merge::report::Report;
use plotters::prelude::*;

const BAR_BEFORE: RGBColor = RGBColor(0xbd, 0xbd, 0xbd);
const BAR_NOW: RGBColor = RGBColor(0x31, 0x82, 0xbd);

/// One labelled row: (label, bytes in the baseline, bytes now).
type Row = (String, Option<i64>, Option<i64>);

/// The SVG for `report`: its `top` groups by bytes saved, or its comparison.
pub fn svg(report: &Report, top: usize) -> Result<String, String> {
    let (caption, rows) = match &report.comparison {
        Some(c) => comparison_rows(c, top),
        None => top_rows(report, top),
    };
    draw(&caption, &rows).map_err(|e| format!("drawing the plot: {e}"))
}

fn top_rows(report: &Report, top: usize) -> (String, Vec<Row>) {
    let rows: Vec<Row> = report
        .groups_by_saved_bytes()
        .into_iter()
        .filter(|g| g.saved_bytes.is_some())
        .take(top)
        .map(|g: GroupView| (g.describe(), None, g.saved_bytes))
        .collect();
    let caption = match report.text_bytes {
        Some(t) => format!(
            "Bytes saved by group ({} mode, .text {t} bytes)",
            report.mode
        ),
        None => "Bytes saved by group (no object written: nothing measured)".to_string(),
    };
    (caption, rows)
}

fn comparison_rows(c: &Comparison, top: usize) -> (String, Vec<Row>) {
    let rows: Vec<Row> = c
        .groups
        .iter()
        .take(top)
        .map(|g| {
            (
                format!("{} {}", g.change.as_str(), g.group),
                g.saved_bytes_before,
                g.saved_bytes_after,
            )
        })
        .collect();
    let text = match (c.text_bytes_before, c.text_bytes_after) {
        (Some(b), Some(a)) => format!(".text {b} -> {a} bytes ({})", signed_with_percent(b, a)),
        _ => ".text not measured".to_string(),
    };
    let caption = format!(
        "Since {}: {text}, {} fold(s) lost",
        c.baseline,
        c.lost_folds.len()
    );
    (caption, rows)
}

fn draw(caption: &str, rows: &[Row]) -> Result<String, Box<dyn std::error::Error>> {
    let n = rows.len().max(1);
    let height = 110 + 34 * n as u32;
    let bytes = |v: Option<i64>| v.unwrap_or(0).max(0) as f64;
    let max = rows
        .iter()
        .map(|r| bytes(r.1).max(bytes(r.2)))
        .fold(1.0, f64::max);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(35)
            .build_cartesian_2d(0.0..max * 1.9, 0.0..n as f64)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc("bytes saved")
            .x_label_formatter(&|x| format!("{}", x.round() as i64))
            .draw()?;
        let two = rows.iter().any(|r| r.1.is_some());
        for (i, (label, before, now)) in rows.iter().enumerate() {
            // The first row at the top.
            let y = (n - 1 - i) as f64;
            if two {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + 0.52), (bytes(*before), y + 0.82)],
                    BAR_BEFORE.filled(),
                )))?;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + 0.18), (bytes(*now), y + 0.48)],
                    BAR_NOW.filled(),
                )))?;
            } else {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + 0.2), (bytes(*now), y + 0.8)],
                    BAR_NOW.filled(),
                )))?;
            }
            let value = |v: &Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
            let text = if two {
                format!("{label}: {} -> {}", value(before), value(now))
            } else {
                format!("{label}: {}", value(now))
            };
            let x = bytes(*before).max(bytes(*now)) + max * 0.02;
            chart.draw_series(std::iter::once(Text::new(
                text,
                (x, y + 0.62),
                ("sans-serif", 12).into_font(),
            )))?;
        }
        if rows.is_empty() {
            chart.draw_series(std::iter::once(Text::new(
                "no groups to show".to_string(),
                (max * 0.05, 0.55),
                ("sans-serif", 14).into_font(),
            )))?;
        }
        if two {
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
                .label("saved in the baseline")
                .legend(|(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], BAR_BEFORE.filled())
                });
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
                .label("saved now")
                .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], BAR_NOW.filled()));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(out)
}
