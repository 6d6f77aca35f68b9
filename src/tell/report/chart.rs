//! The SVG chart of `oomguard report`'s page, drawn by plotters' SVG backend: memory over time
//! across all attempts, the limits as horizontal lines, a marker and label at each death and
//! relaunch; its axis units, and a long timeline thinned to the chart's columns. On a shared
//! GPU, the other processes' memory (samples.csv's `gpu_neighbours_bytes`) is a band stacked on
//! the job's GPU line, up to the card's capacity drawn as a limit; a run without neighbours
//! draws exactly the chart it did before the band was. A job whose Slurm tasks' memory was read
//! place by place (samples.csv's `slurm_parts`) gets a thinner line per place in a colour of its
//! own: one per node (`node n1 (Slurm tasks)`) and one per step sstat sums (`step 12.0, all
//! nodes (sstat)`); a run without Slurm parts draws exactly the chart it did before them.
//!
//! It draws only; the report it draws from is [`crate::tell::report`]'s, and the page around it is
//! [`crate::tell::report::html`].

use std::fmt::Write as _;

use crate::observe::sampler::SlurmPlace;
use crate::observe::units::human_bytes;
use crate::tell::report::samples::{TimelinePoint, SLURM_PLACES_MAX};
use crate::tell::report::RunReport;

impl RunReport {
    /// The chart: memory over time across all attempts, the limits as horizontal lines, a
    /// marker and label at each death and relaunch.
    pub fn svg(&self) -> String {
        let mut svg = String::new();
        if let Err(e) = self.draw(&mut svg) {
            // Drawing into a string fails only on a plotting bug; the page keeps its table.
            tracing::warn!("cannot draw the memory chart: {e}");
            return "<p>(no chart: drawing failed)</p>".into();
        }
        svg
    }

    fn draw(&self, svg: &mut String) -> Result<(), Box<dyn std::error::Error + '_>> {
        use plotters::prelude::*;

        const SIZE: (u32, u32) = (1100, 520);
        let span_s = self
            .attempts
            .iter()
            .map(|a| a.end_s)
            .chain(self.timeline.iter().map(|p| p.t_s))
            .fold(1.0_f64, f64::max);
        let (unit, per_unit) = time_unit(span_s);
        let x_max = span_s / per_unit * 1.02;

        let series: [(&str, RGBColor, Reading); 4] = [
            ("tree memory (PSS, else RSS)", RGBColor(31, 119, 180), |p| {
                p.tree_bytes()
            }),
            ("cgroup usage", RGBColor(44, 160, 44), |p| p.cgroup_bytes),
            ("swap", RGBColor(255, 127, 14), |p| {
                p.swap_bytes.filter(|s| *s > 0)
            }),
            ("GPU", RGBColor(148, 103, 189), |p| p.gpu_bytes),
        ];
        let red = RGBColor(214, 39, 40);
        let limits: Vec<(String, u64, RGBColor)> = [
            ("--memory-max", self.limits.memory_max_bytes, red),
            ("--max-rss", self.limits.max_rss_bytes, red),
            ("--max-gpu", self.limits.max_gpu_bytes, red),
            // The card itself, in the GPU line's colour: what a device OOM ran into.
            (
                "GPU capacity",
                self.limits.gpu_total_bytes,
                RGBColor(148, 103, 189),
            ),
        ]
        .into_iter()
        .filter_map(|(flag, v, colour)| {
            v.map(|v| (format!("limit {flag} {}", human_bytes(v)), v, colour))
        })
        .chain(self.cards_line())
        .collect();
        let mut places = self.slurm_places();
        // A report read from samples.csv names at most this many; one from elsewhere (JSON)
        // is drawn as far as the legend has room.
        places.truncate(SLURM_PLACES_MAX);
        let peak_seen = self
            .timeline
            .iter()
            .flat_map(|p| series.iter().filter_map(move |s| (s.2)(p)))
            .chain(
                self.timeline
                    .iter()
                    .filter_map(TimelinePoint::gpu_stacked_bytes),
            )
            .chain(self.timeline.iter().flat_map(|p| {
                p.slurm_parts
                    .iter()
                    .filter(|part| places.contains(&part.place))
                    .map(|part| part.bytes)
            }))
            .chain(limits.iter().map(|l| l.1))
            .chain(self.attempts.iter().filter_map(|a| a.peaks.memory_bytes()))
            .max()
            .unwrap_or(1 << 20);
        // The axis counts in one binary unit, so its ticks fall on round numbers of it.
        let (y_unit, per_y_unit) = size_unit(peak_seen);
        let y_max = (peak_seen as f64 * 1.25 / per_y_unit).max(1.0);

        {
            let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption("memory over time, all attempts", ("sans-serif", 22))
                .margin(12)
                .x_label_area_size(45)
                .y_label_area_size(80)
                .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
            let x_fmt = |v: &f64| format!("{v:.1}");
            let y_fmt = |v: &f64| format!("{v} {y_unit}");
            chart
                .configure_mesh()
                .x_desc(format!("time since the first attempt started ({unit})"))
                .y_desc("memory")
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .light_line_style(RGBColor(238, 238, 238))
                // One faint line between labelled ones: ten made the grid louder than the data.
                .max_light_lines(1)
                .draw()?;

            let scale = Scale {
                per_unit,
                per_y_unit,
                x_max,
                y_max,
            };
            self.draw_neighbours(&mut chart, &scale)?;
            self.draw_series(&mut chart, &series, &scale)?;
            self.draw_slurm_places(&mut chart, &places, &scale)?;
            draw_limits(&mut chart, &limits, &scale)?;
            self.draw_markers(&mut chart, &scale)?;
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(180, 180, 180))
                .draw()?;
            root.present()?;
        }
        Ok(())
    }
}

/// The chart's plotting area, in the axes' units.
type Chart<'a, 'b> = plotters::chart::ChartContext<
    'a,
    plotters::backend::SVGBackend<'b>,
    plotters::coord::cartesian::Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::types::RangedCoordf64,
    >,
>;

/// A drawing step's failure (only a plotting bug: the SVG goes into a string).
type DrawError = plotters::drawing::DrawingAreaErrorKind<std::io::Error>;

/// How data maps onto the chart: seconds and bytes per axis unit, and the axes' ends.
struct Scale {
    per_unit: f64,
    per_y_unit: f64,
    x_max: f64,
    y_max: f64,
}

impl RunReport {
    /// Each memory series, one segment per attempt (no line across a death and relaunch),
    /// with dots where the segment is short enough to show them.
    fn draw_series(
        &self,
        chart: &mut Chart,
        series: &[(&str, plotters::style::RGBColor, Reading)],
        scale: &Scale,
    ) -> Result<(), DrawError> {
        for &(name, colour, value) in series {
            self.draw_line(chart, name, colour, 2, value, scale)?;
        }
        Ok(())
    }

    /// A line for each Slurm place in `places`, thinner than the job's own series (each is a
    /// part of the job's memory, not all of it), in a colour of its own. Nothing for a run
    /// without Slurm parts.
    fn draw_slurm_places(
        &self,
        chart: &mut Chart,
        places: &[std::sync::Arc<SlurmPlace>],
        scale: &Scale,
    ) -> Result<(), DrawError> {
        for (place, colour) in places.iter().zip(SLURM_COLOURS.iter()) {
            let name = slurm_place_label(place);
            self.draw_line(chart, &name, *colour, 1, |p| p.slurm_bytes(place), scale)?;
        }
        Ok(())
    }

    /// One series, `width` pixels wide: a segment per attempt (no line across a death and
    /// relaunch), thinned to the chart's columns, with dots where the segment is short enough
    /// to show them, and one legend entry.
    fn draw_line(
        &self,
        chart: &mut Chart,
        name: &str,
        colour: plotters::style::RGBColor,
        width: u32,
        value: impl Fn(&TimelinePoint) -> Option<u64>,
        scale: &Scale,
    ) -> Result<(), DrawError> {
        use plotters::prelude::*;
        let mut labelled = false;
        for a in &self.attempts {
            let line: Vec<(f64, f64)> = self
                .timeline
                .iter()
                .filter(|p| p.attempt == a.attempt)
                .filter_map(|p| {
                    value(p).map(|v| (p.t_s / scale.per_unit, v as f64 / scale.per_y_unit))
                })
                .collect();
            if line.is_empty() {
                continue;
            }
            // A day at 1s is 86,400 samples an attempt: keep what a pixel column shows.
            let line = thin(line, scale.x_max / CHART_COLUMNS);
            let dots = line.len() <= MAX_DOTS;
            let drawn =
                chart.draw_series(LineSeries::new(line.clone(), colour.stroke_width(width)))?;
            if !labelled {
                drawn.label(name).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(width))
                });
                labelled = true;
            }
            if dots {
                chart.draw_series(PointSeries::of_element(
                    line,
                    2,
                    colour.filled(),
                    &|c, s, st| Circle::new(c, s, st),
                ))?;
            }
        }
        Ok(())
    }

    /// Where a shared card's neighbours held memory: their band, stacked on the job's GPU line
    /// (from it up to the job's and theirs together), one piece for each stretch of an attempt
    /// whose samples read the neighbours, and only where they held something. Nothing at all
    /// for a run without neighbours, so its chart is the one it always was.
    fn draw_neighbours(&self, chart: &mut Chart, scale: &Scale) -> Result<(), DrawError> {
        use plotters::prelude::*;
        let colour = NEIGHBOURS_COLOUR;
        let mut labelled = false;
        for stretch in self.neighbour_stretches() {
            let at = |p: &TimelinePoint, bytes: u64| {
                (p.t_s / scale.per_unit, bytes as f64 / scale.per_y_unit)
            };
            let job = |p: &TimelinePoint| p.gpu_bytes.unwrap_or(0);
            let top: Vec<(f64, f64)> = stretch
                .iter()
                .map(|p| {
                    at(
                        p,
                        job(p).saturating_add(p.gpu_neighbours_bytes.unwrap_or(0)),
                    )
                })
                .collect();
            let bottom: Vec<(f64, f64)> = stretch.iter().map(|p| at(p, job(p))).collect();
            let column = scale.x_max / CHART_COLUMNS;
            let (top, bottom) = (thin(top, column), thin(bottom, column));
            let outline: Vec<(f64, f64)> = top
                .iter()
                .copied()
                .chain(bottom.iter().rev().copied())
                .collect();
            chart.draw_series(std::iter::once(Polygon::new(
                outline,
                colour.mix(0.3).filled(),
            )))?;
            let drawn = chart.draw_series(LineSeries::new(top, colour.stroke_width(1)))?;
            if !labelled {
                drawn
                    .label("GPU neighbours (other processes), stacked on GPU")
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 4), (x + 18, y + 4)], colour.mix(0.3).filled())
                    });
                labelled = true;
            }
        }
        Ok(())
    }

    /// The stretches of each attempt's samples that read the neighbours' memory (a sample
    /// without a GPU reading ends one), each kept where a neighbour held something in it.
    fn neighbour_stretches(&self) -> Vec<Vec<&TimelinePoint>> {
        let mut stretches: Vec<Vec<&TimelinePoint>> = Vec::new();
        let mut current: Vec<&TimelinePoint> = Vec::new();
        let mut attempt = None;
        for p in &self.timeline {
            if p.gpu_neighbours_bytes.is_none() || attempt != Some(p.attempt) {
                stretches.push(std::mem::take(&mut current));
            }
            attempt = Some(p.attempt);
            if p.gpu_neighbours_bytes.is_some() {
                current.push(p);
            }
        }
        stretches.push(current);
        stretches.retain(|s| s.iter().any(|p| p.gpu_stacked_bytes().is_some()));
        stretches
    }

    /// Where neighbours are drawn, the cards' capacity as samples.csv read it, as a limit line
    /// when the run's recorded GPU capacity (one card's) does not already draw it: a run that
    /// recorded none, or a job on several cards.
    fn cards_line(&self) -> Option<(String, u64, plotters::style::RGBColor)> {
        if self.neighbour_stretches().is_empty() {
            return None;
        }
        let total = self
            .timeline
            .iter()
            .filter_map(|p| p.gpu_total_bytes)
            .max()?;
        if self.limits.gpu_total_bytes == Some(total) {
            return None;
        }
        let name = if self.limits.gpu_total_bytes.is_some() {
            "GPU capacity, all cards"
        } else {
            "GPU capacity"
        };
        Some((
            format!("limit {name} {}", human_bytes(total)),
            total,
            plotters::style::RGBColor(148, 103, 189),
        ))
    }

    /// A marker at each attempt's end: the cause, and the knobs the next one moved.
    fn draw_markers(&self, chart: &mut Chart, scale: &Scale) -> Result<(), DrawError> {
        use plotters::prelude::*;
        use plotters::style::text_anchor::{HPos, Pos, VPos};
        let (x_max, y_max) = (scale.x_max, scale.y_max);
        let marker = RGBColor(90, 90, 90);
        for (i, a) in self.attempts.iter().enumerate() {
            let x = a.end_s / scale.per_unit;
            let mut label = format!("#{} {}", a.attempt, a.cause);
            if let Some(next) = self.attempts.get(i + 1) {
                if !next.changes.is_empty() {
                    let _ = write!(label, "; {}", next.change_text());
                } else {
                    label.push_str("; relaunched unchanged");
                }
            }
            chart.draw_series(LineSeries::new(
                vec![(x, 0.0), (x, y_max * 0.97)],
                marker.stroke_width(1),
            ))?;
            // Labels step down the chart so the ends of short attempts do not overwrite each
            // other.
            let y = y_max * (0.95 - 0.06 * (i % 6) as f64);
            chart.draw_series(std::iter::once(Circle::new(
                (x, y_max * 0.97),
                4,
                marker.filled(),
            )))?;
            // Right of the marker, or left of it in the chart's last third, so it stays inside.
            let anchor = if x > x_max * 0.66 {
                Pos::new(HPos::Right, VPos::Top)
            } else {
                Pos::new(HPos::Left, VPos::Top)
            };
            let style = ("sans-serif", 13).into_font().color(&BLACK).pos(anchor);
            // The cause and knob values are summary.json's, its user's to write: no control
            // character in the page (nor on a terminal that shows its source).
            chart.draw_series(std::iter::once(Text::new(
                format!(" {} ", crate::output::console::printable(&label)),
                (x, y),
                style,
            )))?;
        }
        Ok(())
    }
}

/// The limits, as horizontal lines across the chart.
fn draw_limits(
    chart: &mut Chart,
    limits: &[(String, u64, plotters::style::RGBColor)],
    scale: &Scale,
) -> Result<(), DrawError> {
    use plotters::prelude::*;
    for (label, bytes, colour) in limits {
        let y = *bytes as f64 / scale.per_y_unit;
        let colour = *colour;
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, y), (scale.x_max, y)],
                colour.stroke_width(1),
            ))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(1))
            });
    }
    Ok(())
}

/// The time axis unit for a span: seconds up to 2 minutes, minutes up to 3 hours, else hours.
fn time_unit(span_s: f64) -> (&'static str, f64) {
    if span_s <= 120.0 {
        ("s", 1.0)
    } else if span_s <= 3.0 * 3600.0 {
        ("min", 60.0)
    } else {
        ("h", 3600.0)
    }
}

/// How the chart reads one series from a sample.
type Reading = fn(&TimelinePoint) -> Option<u64>;

/// The unit of the memory axis for a peak: KiB, MiB or GiB, whichever keeps the numbers
/// between 1 and a few thousand.
fn size_unit(peak_bytes: u64) -> (&'static str, f64) {
    if peak_bytes >= 2 << 30 {
        ("GiB", (1u64 << 30) as f64)
    } else if peak_bytes >= 2 << 20 {
        ("MiB", (1u64 << 20) as f64)
    } else {
        ("KiB", 1024.0)
    }
}

/// The neighbours' band: apart from the job's GPU line (purple) and the limits (red).
const NEIGHBOURS_COLOUR: plotters::style::RGBColor = plotters::style::RGBColor(140, 86, 75);

/// The Slurm places' lines, in [`RunReport::slurm_places`]' order: apart from the job's series
/// (blue, green, orange, purple), the limits (red), the neighbours (brown) and the markers
/// (grey), and from each other.
const SLURM_COLOURS: [plotters::style::RGBColor; SLURM_PLACES_MAX] = [
    plotters::style::RGBColor(23, 190, 207),  // cyan
    plotters::style::RGBColor(227, 119, 194), // pink
    plotters::style::RGBColor(188, 189, 34),  // olive
    plotters::style::RGBColor(0, 110, 110),   // teal
    plotters::style::RGBColor(170, 0, 120),   // magenta
    plotters::style::RGBColor(200, 150, 0),   // gold
    plotters::style::RGBColor(60, 60, 160),   // indigo
    plotters::style::RGBColor(150, 150, 255), // periwinkle
];

/// A Slurm place's legend: `node n1 (Slurm tasks)`, `step 12.0, all nodes (sstat)`. A node's
/// name is samples.csv's, whoever wrote it: no control character in the page, and past
/// [`LEGEND_NAME_MAX_CHARS`] cut with `…`, so the legend keeps to the chart.
fn slurm_place_label(place: &SlurmPlace) -> String {
    match place {
        SlurmPlace::Node(name) => {
            let name = crate::output::console::printable(name);
            let shown: String = name.chars().take(LEGEND_NAME_MAX_CHARS).collect();
            let cut = if shown.len() < name.len() { "…" } else { "" };
            format!("node {shown}{cut} (Slurm tasks)")
        }
        SlurmPlace::Step(step) => format!("step {step}, all nodes (sstat)"),
    }
}

/// The longest node name a legend shows whole: Slurm's are host names, far shorter.
const LEGEND_NAME_MAX_CHARS: usize = 40;

/// How many columns of the chart's width the timeline is thinned to.
pub(super) const CHART_COLUMNS: f64 = 1000.0;

/// A dot for each sample only while they are few enough to tell apart.
const MAX_DOTS: usize = 300;

/// `line` (in time order) with, for each column `column_width` wide, only its lowest and
/// highest points, in their order: the drawn shape is the same at the chart's resolution,
/// peaks included, while the page stays small however long the run.
fn thin(line: Vec<(f64, f64)>, column_width: f64) -> Vec<(f64, f64)> {
    if column_width <= 0.0 || line.len() <= 2 * CHART_COLUMNS as usize {
        return line;
    }
    let column = |p: &(f64, f64)| (p.0 / column_width).floor();
    let mut out = Vec::new();
    let mut start = 0;
    while start < line.len() {
        let key = column(&line[start]);
        let (mut low, mut high, mut end) = (start, start, start);
        while end < line.len() && column(&line[end]) == key {
            if line[end].1 < line[low].1 {
                low = end;
            }
            if line[end].1 > line[high].1 {
                high = end;
            }
            end += 1;
        }
        out.push(line[low.min(high)]);
        if low != high {
            out.push(line[low.max(high)]);
        }
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remember::record::summary::{PeakRecord, RunLimits};
    use crate::tell::report::AttemptReport;

    const GIB: u64 = 1 << 30;

    /// The neighbours' bytes by (attempt, sample).
    type Neighbours = fn(u32, u32) -> Option<u64>;

    /// A GPU point: the job's bytes, and the neighbours' and the cards' where read.
    fn point(t_s: f64, attempt: u32, job: u64, neighbours: Option<u64>) -> TimelinePoint {
        TimelinePoint {
            t_s,
            attempt,
            rss_bytes: Some(GIB),
            pss_bytes: None,
            swap_bytes: None,
            gpu_bytes: Some(job),
            cgroup_bytes: None,
            gpu_neighbours_bytes: neighbours,
            gpu_driver_bytes: neighbours.map(|_| 0),
            gpu_total_bytes: neighbours.map(|_| 80 * GIB),
            slurm_parts: Box::default(),
            steps: None,
        }
    }

    fn report(gpu_total: Option<u64>, timeline: Vec<TimelinePoint>) -> RunReport {
        let attempt = |n: u32, start_s: f64, end_s: f64, cause: &str| AttemptReport {
            attempt: n,
            knobs: Vec::new(),
            changes: Vec::new(),
            cause: cause.into(),
            evidence: String::new(),
            exit_code: Some(0),
            signal: None,
            started_at: String::new(),
            duration_s: end_s - start_s,
            start_s,
            end_s,
            peaks: PeakRecord::default(),
            probe: None,
        };
        RunReport {
            run_dir: "/runs/r".into(),
            outcome: "succeeded".into(),
            command: vec!["python3".into()],
            job: None,
            limits: RunLimits {
                gpu_total_bytes: gpu_total,
                ..RunLimits::default()
            },
            attempts: vec![
                attempt(1, 0.0, 10.0, "device_oom"),
                attempt(2, 11.0, 20.0, "ok"),
            ],
            fit_attempt: Some(2),
            fit_knobs: Vec::new(),
            timeline,
            samples_note: None,
        }
    }

    /// Two attempts, the job at 20 GiB, the neighbours' bytes per sample by `neighbours`.
    fn timeline(neighbours: impl Fn(u32, u32) -> Option<u64>) -> Vec<TimelinePoint> {
        (1..=2)
            .flat_map(|a| {
                let neighbours = &neighbours;
                (0..10).map(move |i| {
                    let t = f64::from((a - 1) * 11 + i);
                    point(t, a, 20 * GIB, neighbours(a, i))
                })
            })
            .collect()
    }

    #[test]
    fn a_run_without_neighbours_draws_the_chart_it_always_did() {
        // Before the columns (unknown), and with them but nobody else on the card (zero).
        let unknown = report(Some(80 * GIB), timeline(|_, _| None)).svg();
        let alone = report(Some(80 * GIB), timeline(|_, _| Some(0))).svg();
        assert_eq!(unknown, alone);
        assert!(!unknown.contains("neighbours"));
        assert!(!unknown.contains("<polygon"));
    }

    #[test]
    fn neighbours_are_a_band_on_the_jobs_line_up_to_the_card() {
        // (name, the run's recorded capacity, neighbours by (attempt, sample),
        //  bands drawn, the limit lines' labels)
        type Case = (
            &'static str,
            Option<u64>,
            Neighbours,
            usize,
            &'static [&'static str],
        );
        let table: [Case; 4] = [
            (
                "a neighbour all along: one band an attempt, the card drawn once",
                Some(80 * GIB),
                |_, _| Some(40 * GIB),
                2,
                &["limit GPU capacity 80.0 GiB"],
            ),
            (
                "a neighbour that leaves in attempt 1: its band ends with it",
                Some(80 * GIB),
                |a, i| Some(if a == 1 && i < 5 { 40 * GIB } else { 0 }),
                1,
                &["limit GPU capacity 80.0 GiB"],
            ),
            (
                "samples without a GPU reading split a band",
                Some(80 * GIB),
                |a, i| (a == 2 || i != 4).then_some(40 * GIB),
                3,
                &["limit GPU capacity 80.0 GiB"],
            ),
            (
                "no capacity recorded: the card's total from the samples is the line",
                None,
                |_, _| Some(GIB),
                2,
                &["limit GPU capacity 80.0 GiB"],
            ),
        ];
        for (name, capacity, neighbours, bands, limits) in table {
            let r = report(capacity, timeline(neighbours));
            assert_eq!(r.neighbour_stretches().len(), bands, "{name}");
            let svg = r.svg();
            assert_eq!(svg.matches("<polygon").count(), bands, "{name}");
            assert_eq!(
                svg.matches("GPU neighbours (other processes), stacked on GPU")
                    .count(),
                1,
                "{name}: one legend entry"
            );
            for limit in limits {
                assert_eq!(svg.matches(limit).count(), 1, "{name}: {limit}");
            }
        }
    }

    #[test]
    fn the_cards_line_is_drawn_where_the_recorded_capacity_is_not_it() {
        let with = |capacity, neighbours: Neighbours| {
            report(capacity, timeline(neighbours))
                .cards_line()
                .map(|l| (l.0, l.1))
        };
        type Case = (Option<u64>, Neighbours, Option<(String, u64)>);
        let table: [Case; 4] = [
            (Some(80 * GIB), |_, _| Some(GIB), None),
            (
                None,
                |_, _| Some(GIB),
                Some(("limit GPU capacity 80.0 GiB".into(), 80 * GIB)),
            ),
            // One card's capacity recorded, the job on two: their total too.
            (
                Some(40 * GIB),
                |_, _| Some(GIB),
                Some(("limit GPU capacity, all cards 80.0 GiB".into(), 80 * GIB)),
            ),
            // No neighbours: nothing new.
            (None, |_, _| Some(0), None),
        ];
        for (capacity, neighbours, want) in table {
            assert_eq!(with(capacity, neighbours), want, "{capacity:?}");
        }
    }

    /// `timeline` with the Slurm parts `parts` gives for each (attempt, sample).
    fn with_parts(
        mut timeline: Vec<TimelinePoint>,
        parts: impl Fn(u32, u32) -> Vec<(SlurmPlace, u64)>,
    ) -> Vec<TimelinePoint> {
        // Interned as a read of samples.csv interns them: one allocation a place.
        let mut places: Vec<std::sync::Arc<SlurmPlace>> = Vec::new();
        for (n, p) in timeline.iter_mut().enumerate() {
            let i = n as u32 % 10;
            p.slurm_parts = parts(p.attempt, i)
                .into_iter()
                .map(|(place, bytes)| {
                    let place = match places.iter().find(|known| ***known == place) {
                        Some(known) => known.clone(),
                        None => {
                            places.push(std::sync::Arc::new(place));
                            places[places.len() - 1].clone()
                        }
                    };
                    crate::tell::report::samples::PlaceBytes { place, bytes }
                })
                .collect();
        }
        timeline
    }

    fn node(name: &str) -> SlurmPlace {
        SlurmPlace::Node(name.into())
    }

    fn step(job: u64, step: u64) -> SlurmPlace {
        SlurmPlace::Step(crate::observe::slurm::Step { job, step })
    }

    /// The `<polyline>`s drawn in `colour` (`#17BECF`) `width` wide: a place's segments and
    /// its legend entry.
    fn lines_in(svg: &str, colour: &str, width: u32) -> usize {
        svg.matches(&format!(
            "stroke=\"{colour}\" stroke-width=\"{width}\" points="
        ))
        .count()
    }

    #[test]
    fn a_run_without_slurm_parts_draws_the_chart_it_always_did() {
        // samples.csv from before the column, with it empty, and with only parts that do not
        // parse: the same chart, with no Slurm line nor legend.
        let summary = serde_json::json!({
            "outcome": "succeeded",
            "command": ["srun", "python3"],
            "limits": {"memory_max_bytes": 8 * GIB},
            "attempts": [
                {"attempt": 1, "cause": "host_oom", "exit_code": 1, "signal": null,
                 "duration_s": 3.0},
                {"attempt": 2, "cause": "ok", "exit_code": 0, "signal": null,
                 "duration_s": 3.0},
            ],
        });
        let rows = |last: &dyn Fn(u32) -> String| -> String {
            (0..6u32)
                .map(|i| {
                    format!(
                        "{}.5,{},{},{}{}\n",
                        100 + i,
                        1 + i / 3,
                        (u64::from(i) + 1) * GIB,
                        u64::from(i) * GIB / 2,
                        last(i)
                    )
                })
                .collect()
        };
        let files = [
            format!(
                "unix_time,attempt,tree_rss_bytes,cgroup_bytes\n{}",
                rows(&|_| String::new())
            ),
            format!(
                "unix_time,attempt,tree_rss_bytes,cgroup_bytes,slurm_parts\n{}",
                rows(&|_| ",".into())
            ),
            format!(
                "unix_time,attempt,tree_rss_bytes,cgroup_bytes,slurm_parts\n{}",
                rows(&|i| format!(",node:=1;step:1=2;moon:n1=3;node:n{i}=x;;"))
            ),
        ];
        let svgs: Vec<String> = files
            .iter()
            .map(|csv| {
                let dir = tempfile::tempdir().unwrap();
                std::fs::write(dir.path().join("summary.json"), summary.to_string()).unwrap();
                std::fs::write(dir.path().join("samples.csv"), csv).unwrap();
                let report = crate::tell::report::load(dir.path()).unwrap();
                assert_eq!(report.timeline.len(), 6);
                assert!(report.slurm_places().is_empty());
                report.svg()
            })
            .collect();
        assert_eq!(svgs[0], svgs[1], "an empty column");
        assert_eq!(svgs[0], svgs[2], "parts that do not parse");
        assert!(!svgs[0].contains("Slurm") && !svgs[0].contains("sstat"));
        for colour in SLURM_COLOURS {
            let hex = format!("#{:02X}{:02X}{:02X}", colour.0, colour.1, colour.2);
            assert!(!svgs[0].contains(&hex), "{hex}");
        }
    }

    #[test]
    fn each_slurm_place_is_a_line_of_its_own_with_its_legend() {
        type Parts = fn(u32, u32) -> Vec<(SlurmPlace, u64)>;
        // (name, parts by (attempt, sample), legends in colour order with their segments)
        type Case = (&'static str, Parts, &'static [(&'static str, usize)]);
        let table: [Case; 5] = [
            (
                "two nodes in both attempts: a line each an attempt, one legend each",
                |_, _| vec![(node("n2"), 3 * GIB), (node("n1"), GIB)],
                &[("node n1 (Slurm tasks)", 2), ("node n2 (Slurm tasks)", 2)],
            ),
            (
                "a node read here and a step sstat sums",
                |_, _| vec![(node("n1"), GIB), (step(12, 0), 5 * GIB)],
                &[
                    ("node n1 (Slurm tasks)", 2),
                    ("step 12.0, all nodes (sstat)", 2),
                ],
            ),
            (
                "a node read only in attempt 2, from its third sample",
                |a, i| {
                    if a == 2 && i >= 3 {
                        vec![(node("late"), GIB)]
                    } else {
                        vec![]
                    }
                },
                &[("node late (Slurm tasks)", 1)],
            ),
            (
                "a name's control characters are escaped, its markup is text",
                |_, _| vec![(node("<b>\u{1b}[2J"), GIB)],
                &[("node &lt;b&gt;\\u{1b}[2J (Slurm tasks)", 2)],
            ),
            (
                "a name longer than a legend shows is cut",
                |_, _| vec![(node(&"x".repeat(1000)), GIB)],
                &[(
                    "node xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… (Slurm tasks)",
                    2,
                )],
            ),
        ];
        let plain = report(Some(80 * GIB), timeline(|_, _| None)).svg();
        for (name, parts, want) in table {
            let r = report(Some(80 * GIB), with_parts(timeline(|_, _| None), parts));
            let svg = r.svg();
            for (&(legend, segments), colour) in want.iter().zip(SLURM_COLOURS) {
                let hex = format!("#{:02X}{:02X}{:02X}", colour.0, colour.1, colour.2);
                assert_eq!(svg.matches(legend).count(), 1, "{name}: {legend}\n{svg}");
                assert_eq!(lines_in(&svg, &hex, 1), segments + 1, "{name}: {legend}");
            }
            // No more places than named, and the job's own lines as they were.
            assert_eq!(
                svg.matches("(Slurm tasks)").count() + svg.matches("(sstat)").count(),
                want.len(),
                "{name}"
            );
            for colour in ["#1F77B4", "#9467BD"] {
                assert_eq!(
                    lines_in(&svg, colour, 2),
                    lines_in(&plain, colour, 2),
                    "{name}: {colour}"
                );
            }
        }
    }

    #[test]
    fn the_memory_axis_reaches_the_highest_slurm_place() {
        // The job's own lines at 20 GiB and the card at 80: a node at 100 GiB sets the axis.
        let high = with_parts(timeline(|_, _| None), |_, _| vec![(node("n1"), 100 * GIB)]);
        let svg = report(Some(80 * GIB), high).svg();
        let plain = report(Some(80 * GIB), timeline(|_, _| None)).svg();
        assert!(svg.contains("\n120 GiB\n"), "{svg}");
        assert!(!plain.contains("\n120 GiB\n"));
    }

    #[test]
    fn a_long_slurm_line_is_thinned_like_the_others() {
        // Two attempts of 5,000 samples each: each node's segments keep at most two points a
        // column, however many samples.
        let long: Vec<TimelinePoint> = (0..10_000u32)
            .map(|i| point(f64::from(i) * 0.002, 1 + i / 5_000, GIB, None))
            .collect();
        let long = with_parts(long, |_, _| vec![(node("n1"), GIB), (node("n2"), 2 * GIB)]);
        let r = report(None, long);
        let svg = r.svg();
        let cyan = svg
            .split("<polyline")
            .find(|l| l.contains("stroke=\"#17BECF\" stroke-width=\"1\""))
            .unwrap();
        let points = cyan
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let n = points.split_whitespace().count();
        assert!(n <= 2 * CHART_COLUMNS as usize + 2, "{n}");
        assert!(n > 2, "{n}");
    }

    #[test]
    fn a_long_timeline_is_thinned_to_the_columns_keeping_peaks() {
        // Two days at 1s, flat at 1.0 with one spike to 9.0 and one dip to 0.0.
        let mut line: Vec<(f64, f64)> = (0..172_800).map(|t| (t as f64, 1.0)).collect();
        line[100_000].1 = 9.0;
        line[50_000].1 = 0.0;
        let thinned = thin(line.clone(), 172_800.0 / CHART_COLUMNS);
        assert!(
            thinned.len() <= 2 * CHART_COLUMNS as usize + 2,
            "{}",
            thinned.len()
        );
        assert!(thinned.contains(&(100_000.0, 9.0)) && thinned.contains(&(50_000.0, 0.0)));
        assert!(
            thinned.windows(2).all(|w| w[0].0 < w[1].0),
            "time order kept"
        );
        // A short one is left as it is.
        assert_eq!(thin(line[..500].to_vec(), 1.0), line[..500].to_vec());
    }

    #[test]
    fn time_axis_unit_follows_the_span() {
        let table = [
            (30.0, "s"),
            (120.0, "s"),
            (600.0, "min"),
            (8.0 * 3600.0, "h"),
        ];
        for (span, unit) in table {
            assert_eq!(time_unit(span).0, unit, "{span}");
        }
    }

    #[test]
    fn memory_axis_unit_follows_the_peak() {
        let table = [
            (1 << 20, "KiB"),
            (3 << 20, "MiB"),
            (1 << 30, "MiB"),
            (5 << 30, "GiB"),
        ];
        for (peak, unit) in table {
            assert_eq!(size_unit(peak).0, unit, "{peak}");
        }
    }
}
