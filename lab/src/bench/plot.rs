//! The benches' figures as PNG charts: one line with markers per series, a legend naming them.
//! Text is drawn with ab_glyph from a TTF read at run time, so building needs no fontconfig or
//! freetype (plotters' default "ttf" feature links both).

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, ensure};
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

/// DejaVu Sans, from Debian's fonts-dejavu-core.
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const SIZE: (u32, u32) = (900, 560);
/// Distinct on white (no yellow); blue and orange first, a pair colour-blind readers tell apart.
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
    pub log_y: bool,
}

/// Renders `series` as lines with markers into a PNG at `path` (about 900x560), a legend naming
/// each series. Series without points are left out; if none has any, that is an error.
pub fn png(path: &Path, chart: &Chart, series: &[Series]) -> Result<()> {
    let shown: Vec<&Series> = series.iter().filter(|s| !s.points.is_empty()).collect();
    ensure!(
        !shown.is_empty(),
        "{}: no series has points",
        path.display()
    );
    for s in &shown {
        check_points(chart, s)
            .with_context(|| format!("{}: series {:?}", path.display(), s.name))?;
    }
    font().with_context(|| format!("plotting {}", path.display()))?;
    let x = range(
        shown.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        chart.log_x,
    );
    let y = range(
        shown.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        chart.log_y,
    );
    // One coordinate type per combination of linear and log axes, hence the four calls.
    let drawn = match (chart.log_x, chart.log_y) {
        (false, false) => draw(path, chart, &shown, x, y),
        (true, false) => draw(path, chart, &shown, log_axis(x), y),
        (false, true) => draw(path, chart, &shown, x, log_axis(y)),
        (true, true) => draw(path, chart, &shown, log_axis(x), log_axis(y)),
    };
    drawn.map_err(|e| anyhow!("drawing {}: {e}", path.display()))
}

/// Finite points, and positive ones on a log axis, which has no place for zero.
fn check_points(chart: &Chart, series: &Series) -> Result<()> {
    for &(x, y) in &series.points {
        ensure!(
            x.is_finite() && y.is_finite(),
            "point ({x}, {y}) is not finite"
        );
        ensure!(!chart.log_x || x > 0.0, "x = {x} on a log axis");
        ensure!(!chart.log_y || y > 0.0, "y = {y} on a log axis");
    }
    Ok(())
}

/// Registered once per process: plotters keeps fonts for the process's life, so the bytes
/// are leaked once, and a second registration would leak them again.
fn font() -> Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT).map_err(|e| {
                format!("reading {FONT}: {e} (install it: apt-get install fonts-dejavu-core)")
            })?;
            register_font("sans-serif", FontStyle::Normal, bytes.leak())
                .map_err(|_| format!("{FONT} is not a TrueType or OpenType font"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// The axis range of `values`, 5% of their span beyond them on each side (of their span in
/// decades on a log axis). Non-negative data keep a linear axis at zero or above: no negative
/// seconds or KiB on the scale.
fn range(values: impl Iterator<Item = f64>, log: bool) -> Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if log {
        let (lo_exp, hi_exp) = (lo.log10(), hi.log10());
        let pad = if hi_exp > lo_exp {
            (hi_exp - lo_exp) * 0.05
        } else {
            0.3
        };
        return 10f64.powf(lo_exp - pad)..10f64.powf(hi_exp + pad);
    }
    let pad = match hi - lo {
        span if span > 0.0 => span * 0.05,
        _ if lo == 0.0 => 1.0,
        _ => lo.abs() * 0.1,
    };
    let start = if lo >= 0.0 {
        (lo - pad).max(0.0)
    } else {
        lo - pad
    };
    start..hi + pad
}

/// A log axis over `range` labelled at 1, 2, 3 and 5 times the powers of ten, or fewer of
/// those when they would crowd, and ruled lightly at each multiple of them: plotters' own key
/// points on a log axis crowd at the decades ("9000" runs into "10000") and leave a decade
/// below the first power of ten unlabelled.
fn log_axis(range: Range<f64>) -> WithKeyPoints<LogCoord<f64>> {
    const MAX_LABELS: usize = 10;
    let steps: [&[f64]; 5] = [
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        &[1.0, 2.0, 3.0, 5.0],
        &[1.0, 2.0, 5.0],
        &[1.0, 3.0],
        &[1.0],
    ];
    let labels = steps
        .iter()
        .map(|steps| decade_multiples(&range, steps))
        .find(|labels| labels.len() <= MAX_LABELS)
        .unwrap_or_default();
    // Narrower than one step of the densest set: label the ends of the axis.
    let labels = if labels.len() < 2 {
        vec![range.start, range.end]
    } else {
        labels
    };
    let light = decade_multiples(&range, steps[0]);
    range
        .log_scale()
        .with_key_points(labels)
        .with_light_points(light)
}

/// `steps` times each power of ten, those within `range`.
fn decade_multiples(range: &Range<f64>, steps: &[f64]) -> Vec<f64> {
    let decades = range.start.log10().floor() as i32..=range.end.log10().ceil() as i32;
    decades
        .flat_map(|exp| steps.iter().map(move |step| step * 10f64.powi(exp)))
        .filter(|value| range.contains(value))
        .collect()
}

/// A tick label without trailing zeros, whole numbers from 100 up, three significant digits
/// below: "30000", "2.5", "0.012", not "30000.0" or "0.012000000000000002".
fn tick(value: &f64) -> String {
    if *value == 0.0 {
        return "0".to_owned();
    }
    let decimals = (2 - value.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

fn draw<X, Y>(
    path: &Path,
    chart: &Chart,
    series: &[&Series],
    x: X,
    y: Y,
) -> Result<(), DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut plot = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(76)
        .build_cartesian_2d(x, y)?;
    plot.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .light_line_style(BLACK.mix(0.04))
        .bold_line_style(BLACK.mix(0.15))
        .draw()?;
    for (s, color) in series.iter().zip(COLORS.iter().cycle()) {
        plot.draw_series(
            LineSeries::new(s.points.iter().copied(), color.filled().stroke_width(2)).point_size(4),
        )?
        .label(s.name.as_str())
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], color.stroke_width(3)));
    }
    // Upper left: bench curves grow with the cluster, so that corner is usually empty.
    plot.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    root.present()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("evictkit-plot-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn series(name: &str, points: &[(f64, f64)]) -> Series {
        Series {
            name: name.to_owned(),
            points: points.to_vec(),
        }
    }

    /// A PNG with text and lines on it: a blank 900x560 one compresses to well under 1 KiB.
    fn assert_drawn(path: &Path) {
        let bytes = std::fs::read(path).unwrap();
        assert!(
            bytes.starts_with(PNG_SIGNATURE),
            "{} is no PNG",
            path.display()
        );
        assert!(
            bytes.len() > 8 * 1024,
            "{}: {} bytes",
            path.display(),
            bytes.len()
        );
    }

    #[test]
    fn plot_two_series_on_linear_axes() {
        let dir = dir("linear");
        let path = dir.join("linear.png");
        let chart = Chart {
            title: "Eviction time",
            x_label: "pods",
            y_label: "seconds",
            log_x: false,
            log_y: false,
        };
        let shown = [
            series(
                "taint-manager",
                &[(1000.0, 1.2), (5000.0, 4.8), (10000.0, 9.5)],
            ),
            series("upstream", &[(1000.0, 2.0), (5000.0, 9.1), (10000.0, 19.0)]),
            series("not measured", &[]),
        ];
        png(&path, &chart, &shown).unwrap();
        assert_drawn(&path);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plot_log_axes() {
        let dir = dir("log");
        let path = dir.join("log.png");
        let chart = Chart {
            title: "Controller RSS",
            x_label: "cluster size (pods)",
            y_label: "RSS (KiB)",
            log_x: true,
            log_y: true,
        };
        let shown = [
            series(
                "ours",
                &[(1000.0, 18_000.0), (10000.0, 41_000.0), (30000.0, 96_000.0)],
            ),
            series(
                "upstream",
                &[
                    (1000.0, 52_000.0),
                    (10000.0, 180_000.0),
                    (30000.0, 510_000.0),
                ],
            ),
        ];
        png(&path, &chart, &shown).unwrap();
        assert_drawn(&path);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plot_errors_name_the_file() {
        let path = Path::new("/nonexistent/evictkit/p.png");
        let chart = Chart {
            title: "t",
            x_label: "x",
            y_label: "y",
            log_x: false,
            log_y: true,
        };
        let empty = png(path, &chart, &[series("a", &[])]).unwrap_err();
        assert_eq!(
            empty.to_string(),
            "/nonexistent/evictkit/p.png: no series has points"
        );
        let zero = png(path, &chart, &[series("a", &[(1.0, 0.0)])]).unwrap_err();
        assert_eq!(
            format!("{zero:#}"),
            "/nonexistent/evictkit/p.png: series \"a\": y = 0 on a log axis"
        );
        let unwritable = png(path, &chart, &[series("a", &[(1.0, 2.0)])]).unwrap_err();
        assert!(
            unwritable
                .to_string()
                .starts_with("drawing /nonexistent/evictkit/p.png: "),
            "{unwritable}"
        );
    }

    #[test]
    fn plot_ranges_and_ticks() {
        let cases: [(&[f64], bool, Range<f64>); 5] = [
            (&[0.0, 10.0], false, 0.0..10.5),
            (&[2.0, 12.0], false, 1.5..12.5),
            (&[-10.0, 10.0], false, -11.0..11.0),
            (&[5.0, 5.0], false, 4.5..5.5),
            (&[100.0, 10_000.0], true, 10f64.powf(1.9)..10f64.powf(4.1)),
        ];
        for (values, log, want) in cases {
            let got = range(values.iter().copied(), log);
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
            assert!(
                close(got.start, want.start) && close(got.end, want.end),
                "{values:?}: {got:?}"
            );
        }
        let ticks = [
            (30000.0, "30000"),
            (2.5, "2.5"),
            (0.012_000_000_000_000_002, "0.012"),
            (0.0, "0"),
            (-1.25, "-1.25"),
        ];
        for (value, want) in ticks {
            assert_eq!(tick(&value), want);
        }
        let log_labels = [
            (843.0..35_400.0, vec![1e3, 2e3, 3e3, 5e3, 1e4, 2e4, 3e4]),
            (2.5..10.5, vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]),
            (
                0.5..5000.0,
                vec![1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0],
            ),
            (4.6..5.4, vec![4.6, 5.4]),
        ];
        for (range, want) in log_labels {
            let labels = log_axis(range.clone()).bold_points().to_vec();
            assert!(
                labels.len() == want.len()
                    && labels
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| (a - b).abs() <= 1e-9 * b),
                "{range:?}: {labels:?}"
            );
        }
    }
}
