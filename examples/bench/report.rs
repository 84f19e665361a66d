//! Figures: medians of runs, printed one per line, and a summary at the end.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// A target a figure should meet.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    AtLeast(f64),
    AtMost(f64),
    /// Between the two, both included.
    Within(f64, f64),
}

impl Target {
    fn met(self, value: f64) -> bool {
        match self {
            Target::AtLeast(t) => value >= t,
            Target::AtMost(t) => value <= t,
            Target::Within(low, high) => (low..=high).contains(&value),
        }
    }

    fn text(self) -> String {
        match self {
            Target::AtLeast(t) => format!(">={}", trim(t)),
            Target::AtMost(t) => format!("<={}", trim(t)),
            Target::Within(low, high) => format!("{low:.3}..{high:.3}"),
        }
    }
}

fn trim(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// Median, min and max of some runs.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Summary {
        assert!(!samples.is_empty(), "a figure needs at least one run");
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Summary {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            n,
        }
    }
}

/// One printed figure.
#[derive(Clone, Debug)]
pub struct Figure {
    pub name: String,
    pub unit: &'static str,
    pub summary: Summary,
    pub target: Option<Target>,
    pub extra: String,
}

impl Figure {
    fn line(&self) -> String {
        let decimals = match self.unit {
            "ratio" => 3,
            "ms" => 3,
            "MB" => 1,
            _ => 0,
        };
        let s = self.summary;
        let mut line = format!(
            "{}={:.d$} unit={} n={} min={:.d$} max={:.d$}",
            self.name,
            s.median,
            self.unit,
            s.n,
            s.min,
            s.max,
            d = decimals
        );
        if let Some(target) = self.target {
            let met = if target.met(s.median) { "yes" } else { "NO" };
            line.push_str(&format!(" target={} met={met}", target.text()));
        }
        if !self.extra.is_empty() {
            line.push(' ');
            line.push_str(&self.extra);
        }
        line
    }
}

/// Every figure printed so far, for the summary.
#[derive(Default)]
pub struct Report {
    figures: Mutex<Vec<Figure>>,
}

impl Report {
    /// Prints a figure from its runs and keeps it for the summary. Returns the median.
    pub fn figure(
        &self,
        name: impl Into<String>,
        unit: &'static str,
        samples: &[f64],
        target: Option<Target>,
        extra: impl Into<String>,
    ) -> f64 {
        let figure = Figure {
            name: name.into(),
            unit,
            summary: Summary::of(samples),
            target,
            extra: extra.into(),
        };
        println!("{}", figure.line());
        let median = figure.summary.median;
        self.figures.lock().unwrap().push(figure);
        median
    }

    /// The figures with a target, and whether each is met.
    pub fn print_summary(&self) {
        let figures = self.figures.lock().unwrap();
        let with_target: Vec<&Figure> = figures.iter().filter(|f| f.target.is_some()).collect();
        if with_target.is_empty() {
            return;
        }
        println!("# --- summary: figures with a target ---");
        for figure in with_target {
            println!("# {}", figure.line());
        }
    }
}

/// The `q` quantile (0..=1) of sorted values, nearest rank.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Latencies in logarithmic buckets 1% wide: the quantiles of any number of samples in a
/// few kB (runs of hours at thousands of jobs per second would not keep every sample).
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    /// Bucket (`round(ln(µs) / LN_STEP)`) → samples in it.
    counts: BTreeMap<u32, u64>,
    n: u64,
}

/// The width of a bucket, as a difference of natural logarithms (1%).
const LN_STEP: f64 = 0.01;

impl Histogram {
    /// Adds one sample, in microseconds.
    pub fn record_us(&mut self, us: u64) {
        let bucket = ((us.max(1) as f64).ln() / LN_STEP).round() as u32;
        *self.counts.entry(bucket).or_default() += 1;
        self.n += 1;
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (bucket, count) in &other.counts {
            *self.counts.entry(*bucket).or_default() += count;
        }
        self.n += other.n;
    }

    /// How many samples.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// The `q` quantile (0..=1) in milliseconds, nearest rank, within 1%; NaN when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (bucket, count) in &self.counts {
            seen += count;
            if seen >= rank {
                return (f64::from(*bucket) * LN_STEP).exp() / 1000.0;
            }
        }
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::Histogram;

    #[test]
    fn histogram_quantiles_within_one_percent() {
        let mut histogram = Histogram::default();
        for us in 1..=10_000 {
            histogram.record_us(us);
        }
        for (q, exact_ms) in [(0.5, 5.0), (0.99, 9.9), (1.0, 10.0)] {
            let ms = histogram.quantile_ms(q);
            assert!((ms / exact_ms - 1.0).abs() < 0.01, "q={q}: {ms} ms");
        }
        assert!(Histogram::default().quantile_ms(0.5).is_nan());
    }
}
