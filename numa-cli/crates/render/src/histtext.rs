//! bcc-style text histograms: `low -> high : count |****|`.
use std::io::Write;

use numa_core::model::log2::BucketCount;

/// One row per bucket; the fullest bucket's bar is 40 stars wide.
pub fn write(out: &mut impl Write, rows: &[BucketCount], unit: &str) -> std::io::Result<()> {
    let max = rows.iter().map(|r| r.count).max().unwrap_or(0);
    if max == 0 {
        return writeln!(out, "     (no samples)");
    }
    // The first row's lower bound is half its upper bound (log2 buckets).
    let mut low = rows
        .first()
        .map_or(0.0, |r| if r.le > 1.0 { r.le / 2.0 } else { 0.0 });
    for r in rows {
        let stars = (r.count * 40).div_ceil(max) as usize;
        writeln!(
            out,
            "  {:>14} -> {:<14} : {:<10} |{:<40}|",
            fmt(low, unit),
            fmt(r.le, unit),
            r.count,
            "*".repeat(stars)
        )?;
        low = r.le;
    }
    Ok(())
}

fn fmt(v: f64, unit: &str) -> String {
    if v == v.trunc() {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.3}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bcc_form() {
        let rows = vec![
            BucketCount { le: 1.0, count: 2 },
            BucketCount { le: 2.0, count: 4 },
        ];
        let mut out = Vec::new();
        write(&mut out, &rows, "").expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("0 -> 1"), "{text}");
        assert!(text.contains(": 4"), "{text}");
        assert!(text.contains(&format!("|{}|", "*".repeat(40))), "{text}");
    }
}
