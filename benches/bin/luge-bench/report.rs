//! The report every experiment writes: `data.csv`, `table.md`, `plot.svg`
//! and `machine.md` under `<out>/<experiment>/`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::Setup;

/// One experiment's results, written as CSV, a markdown table and a plot.
pub(crate) struct Report {
    pub name: &'static str,
    pub title: String,
    pub columns: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
    pub x_desc: &'static str,
    pub y_desc: &'static str,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    pub notes: String,
}

fn machine(engine: &luge_core::EngineId) -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .unwrap_or("")
        .to_owned();
    format!(
        "- CPU: {cpu}, {} logical cores\n- {mem}\n- kernel {}- arch {}\n- engine: {}\n- measured: {}\n",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        read("/proc/sys/kernel/osrelease"),
        std::env::consts::ARCH,
        engine,
        httpdate::fmt_http_date(std::time::SystemTime::now()),
    )
}

pub(crate) fn write(out: &Path, report: &Report, setup: &Setup) -> anyhow::Result<PathBuf> {
    let dir = out.join(report.name);
    std::fs::create_dir_all(&dir)?;
    let mut csv = csv::Writer::from_path(dir.join("data.csv"))?;
    csv.write_record(&report.columns)?;
    for row in &report.rows {
        csv.write_record(row)?;
    }
    csv.flush()?;
    let mut md = format!(
        "## {}\n\nEngine: {} (`--engine {}`). {}\n\n",
        report.title,
        setup.runtime.id(),
        setup.engine,
        report.notes
    );
    let _ = writeln!(md, "| {} |", report.columns.join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(report.columns.len()));
    for row in &report.rows {
        let _ = writeln!(md, "| {} |", row.join(" | "));
    }
    std::fs::write(dir.join("table.md"), md)?;
    std::fs::write(dir.join("machine.md"), machine(setup.runtime.id()))?;
    if !report.series.is_empty() {
        plot(&dir.join("plot.svg"), report).map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    }
    Ok(dir)
}

fn plot(path: &Path, report: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let points = report.series.iter().flat_map(|s| s.1.iter());
    let (mut x_max, mut y_max) = (0f64, 0f64);
    for &(x, y) in points {
        x_max = x_max.max(x);
        y_max = y_max.max(y);
    }
    let area = SVGBackend::new(path, (900, 560)).into_drawing_area();
    area.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&area)
        .caption(&report.title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max * 1.05 + 1e-9, 0f64..y_max * 1.1 + 1e-9)?;
    chart
        .configure_mesh()
        .x_desc(report.x_desc)
        .y_desc(report.y_desc)
        .draw()?;
    for (i, (name, points)) in report.series.iter().enumerate() {
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
