//! Renders the scheduling experiments' CSV (target/experiments/, written by
//! `cargo bench --bench sched_experiments`) as SVG plots in docs/plots/.
//!
//! `cargo bench -p luge-benches --bench plot_experiments`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read_csv(path: &Path) -> Vec<Vec<String>> {
    let mut reader = csv::Reader::from_path(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run the sched_experiments bench first",
            path.display()
        )
    });
    reader
        .records()
        .map(|record| {
            let record = record.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            record.iter().map(str::to_owned).collect()
        })
        .collect()
}

/// Miss rate of the smallest class's tight-deadline requests against load,
/// one line per policy and preemption setting.
fn deadline_plot(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let rows = read_csv(&root().join("target/experiments/deadline_misses.csv"));
    let Some(first_class) = rows.first().map(|r| r[3].clone()) else {
        return Ok(());
    };
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r[3] == first_class && r[4] == "true")
    {
        let (load, miss): (f64, f64) = (r[2].parse()?, r[5].parse()?);
        series
            .entry(format!("{} / {}", r[0], r[1]))
            .or_default()
            .push((load, miss));
    }
    let area = SVGBackend::new(out, (900, 560)).into_drawing_area();
    area.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&area)
        .caption(
            format!("Deadline misses, {first_class} tight deadlines"),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(45f64..100f64, 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_desc("offered load, % of capacity")
        .y_desc("miss rate, %")
        .draw()?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    area.present()?;
    Ok(())
}

/// p50 and p99 latency of the short class per case.
fn hol_plot(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let rows = read_csv(&root().join("target/experiments/head_of_line.csv"));
    // The label may hold commas (it is quoted): the last five fields are
    // the numbers, everything before them the label.
    let cases: Vec<(String, f64, f64)> = rows
        .iter()
        .filter(|r| r.len() >= 6)
        .map(|r| {
            let n = r.len();
            let label = r[..n - 5].join(",").trim_matches('"').to_owned();
            Ok((label, r[n - 5].parse()?, r[n - 4].parse()?))
        })
        .collect::<Result<_, std::num::ParseFloatError>>()?;
    let max = cases.iter().map(|c| c.2).fold(0.0, f64::max) * 1.1;
    let area = SVGBackend::new(out, (900, 560)).into_drawing_area();
    area.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&area)
        .caption(
            "Short (10 ms) functions beside long (100 ms) ones at 70 % CPU",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(260)
        .build_cartesian_2d(0f64..max.max(1.0), (0..cases.len()).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(cases.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => cases.get(*i).map(|c| c.0.clone()).unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc("short-class latency, ms (bar: p99, black tick: p50)")
        .draw()?;
    let row = |i: usize| (SegmentValue::Exact(i), SegmentValue::Exact(i + 1));
    chart.draw_series(cases.iter().enumerate().map(|(i, c)| {
        let (bottom, top) = row(i);
        let mut bar = Rectangle::new([(0.0, bottom), (c.2, top)], BLUE.mix(0.5).filled());
        bar.set_margin(6, 6, 0, 0);
        bar
    }))?;
    chart.draw_series(cases.iter().enumerate().map(|(i, c)| {
        let (bottom, top) = row(i);
        let half = max * 0.003;
        let mut tick = Rectangle::new([(c.1 - half, bottom), (c.1 + half, top)], BLACK.filled());
        tick.set_margin(6, 6, 0, 0);
        tick
    }))?;
    area.present()?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = root().join("docs/plots");
    std::fs::create_dir_all(&dir)?;
    deadline_plot(&dir.join("deadline_misses.svg"))?;
    hol_plot(&dir.join("head_of_line.svg"))?;
    println!("wrote {}", dir.display());
    Ok(())
}
