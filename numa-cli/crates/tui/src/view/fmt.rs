//! Number formatting for narrow columns.

/// `0`, `7.5`, `123`, `12.3k`, `4.5M`.
pub fn rate(v: f64) -> String {
    if !v.is_finite() || v <= 0.0 {
        return "0".into();
    }
    if v < 10.0 {
        format!("{v:.1}")
    } else if v < 1000.0 {
        format!("{v:.0}")
    } else if v < 1e6 {
        format!("{:.1}k", v / 1e3)
    } else if v < 1e9 {
        format!("{:.1}M", v / 1e6)
    } else {
        format!("{:.1}G", v / 1e9)
    }
}

/// Integer counts: `950`, `12k`, `3.4M`.
pub fn count(v: u64) -> String {
    match v {
        0..=9_999 => v.to_string(),
        10_000..=999_999 => format!("{}k", v / 1000),
        1_000_000..=9_999_999 => format!("{:.1}M", v as f64 / 1e6),
        10_000_000..=999_999_999 => format!("{}M", v / 1_000_000),
        _ => format!("{:.1}G", v as f64 / 1e9),
    }
}

/// Milliseconds: `0.5ms`, `268ms`, `4.3s`, `18m`, `5h`.
pub fn ms(v: f64) -> String {
    if v < 1.0 {
        format!("{v:.1}ms")
    } else if v < 1000.0 {
        format!("{v:.0}ms")
    } else if v < 60_000.0 {
        format!("{:.1}s", v / 1e3)
    } else if v < 3_600_000.0 {
        format!("{:.0}m", v / 60e3)
    } else {
        format!("{:.0}h", v / 3600e3)
    }
}

/// Nanoseconds as a short duration label: `1us`, `33ms`, `1s`, `17m`.
pub fn ns_label(v: u64) -> String {
    let v = v as f64;
    if v < 1e3 {
        format!("{v:.0}ns")
    } else if v < 1e6 {
        format!("{:.0}us", v / 1e3)
    } else if v < 1e9 {
        format!("{:.0}ms", v / 1e6)
    } else if v < 60e9 {
        format!("{:.0}s", v / 1e9)
    } else if v < 3600e9 {
        format!("{:.0}m", v / 60e9)
    } else {
        format!("{:.0}h", v / 3600e9)
    }
}

/// KiB as `1.9G`, `310M`, `64K`.
pub fn kb(v: u64) -> String {
    let v = v as f64;
    if v >= 1024.0 * 1024.0 {
        format!("{:.1}G", v / 1024.0 / 1024.0)
    } else if v >= 1024.0 {
        format!("{:.0}M", v / 1024.0)
    } else {
        format!("{v:.0}K")
    }
}

/// Bytes as `2M`, `128M`, `1.5G`, `4K`.
pub fn bytes(v: u64) -> String {
    kb(v / 1024)
}

/// "kswapd 5, direct 2": a map's nonzero counts, in its order.
pub fn nonzero_counts<'a>(m: impl IntoIterator<Item = (&'a String, &'a u64)>) -> Vec<String> {
    m.into_iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {}", count(*n)))
        .collect()
}

pub fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "-".to_owned(), f)
}

/// Cuts `s` to `n` characters, marking the cut with `~`.
pub fn fit(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else if n == 0 {
        String::new()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('~')).collect()
    }
}

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The last `width` values as a one-line sparkline scaled to their max;
/// left-padded with spaces when there is less history.
pub fn sparkline(values: &[f64], width: usize) -> String {
    let tail = &values[values.len().saturating_sub(width)..];
    let max = tail.iter().copied().fold(0.0f64, f64::max);
    let mut s = " ".repeat(width - tail.len());
    for v in tail {
        if max <= 0.0 || *v <= 0.0 {
            s.push(' ');
        } else {
            let i = ((v / max) * 7.0).round() as usize;
            s.push(BARS[i.min(7)]);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(rate(0.0), "0");
        assert_eq!(rate(7.46), "7.5");
        assert_eq!(rate(12_345.0), "12.3k");
        assert_eq!(count(12_345), "12k");
        assert_eq!(ms(268.4), "268ms");
        assert_eq!(ms(4300.0), "4.3s");
        assert_eq!(ns_label(1 << 30), "1s");
        assert_eq!(kb(1_958_760), "1.9G");
        assert_eq!(fit("hot-chunks", 5), "hot-~");
        assert_eq!(sparkline(&[0.0, 1.0, 2.0], 5), "   ▅█");
        assert_eq!(sparkline(&[1.0; 10], 3), "███");
    }
}
