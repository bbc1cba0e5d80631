//! The funnel's one-line answer to "why are these pages still on the slow
//! tier": the first stage where most slow-tier activity stops.
use std::fmt;

use super::stages::Stages;

/// A pass missing for this long can be the scan period (the kernel's
/// `numa_balancing_scan_period_min_ms` is 1 s and it grows from there), so
/// shorter silences are no verdict of their own.
pub const UNSCANNED_MIN_NS: u64 = 10 * 1_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The scanner came by and skipped it, and has not scanned it for
    /// `for_ns`: the skips since the latest pass, by their main reason.
    NotScanned {
        for_ns: u64,
        reason: String,
        skips: u64,
    },
    /// Protected, and most protected pages never faulted.
    Cold {
        protected: u64,
        faulted: u64,
    },
    /// Faulted, but the kernel made no tiering decision for most faults
    /// (not tiering, or no decision seen).
    Undecided {
        faults: u64,
        decisions: u64,
    },
    /// Most decisions refused because the latency was over the threshold.
    /// On the fault-count RFC's kernel (`fault_count`) the kernel's
    /// "latency" and threshold are hint-fault counts, not ms.
    RefusedLatency {
        refused: u64,
        decisions: u64,
        mean_ms: Option<u64>,
        threshold_ms: Option<u32>,
        fault_count: bool,
    },
    RefusedRateLimit {
        refused: u64,
        decisions: u64,
    },
    RefusedOther {
        refused: u64,
        decisions: u64,
    },
    /// Promotion decided, but most migrations (folios) failed.
    MigrationFailed {
        failed: u64,
        tried: u64,
    },
    Promoted {
        promoted: u64,
        decisions: u64,
    },
    /// Promoted, and most promotions demoted again within the lifecycle's
    /// window: the pages bounce between the tiers.
    PingPong {
        pingpong: u64,
        promotions: u64,
        /// The median time on the top tier (a log2 bucket's bound).
        residency_ms: Option<u64>,
    },
    /// No slow-tier page protected or faulted, no skip.
    Quiet,
}

impl Verdict {
    /// The verdict on a kernel whose threshold measures `hotness`.
    pub fn with_hotness(mut self, hotness: crate::params::KernelHotness) -> Verdict {
        if let Verdict::RefusedLatency { fault_count, .. } = &mut self {
            *fault_count = hotness == crate::params::KernelHotness::FaultCount;
        }
        self
    }

    /// The verdict once demotions are known: promoted, but most of those
    /// promotions (of `trips`, the process's) demoted again, is a
    /// ping-pong.
    pub fn with_pingpong(self, trips: Option<&super::super::lifecycle::Trips>) -> Verdict {
        match (&self, trips) {
            (Verdict::Promoted { .. }, Some(t)) if t.pingpong.saturating_mul(2) > t.promotions => {
                Verdict::PingPong {
                    pingpong: t.pingpong,
                    promotions: t.promotions,
                    residency_ms: t.residency_p50_ms(),
                }
            }
            _ => self,
        }
    }

    /// The verdict in at most about 20 characters, for a table cell: what
    /// stops the pages and the one figure that decides it
    /// (`pid_inactive 42s`: skipped for that reason, unscanned for 42 s).
    pub fn short(&self) -> String {
        let compact = |ms: u64| secs(ms).replace(' ', "");
        match self {
            Verdict::NotScanned { for_ns, reason, .. } => {
                format!("{reason} {}", compact(for_ns / 1_000_000))
            }
            Verdict::Cold { .. } => "cold".into(),
            Verdict::Undecided { .. } => "no decision".into(),
            Verdict::RefusedLatency {
                mean_ms,
                threshold_ms,
                fault_count,
                ..
            } => {
                let v = |n: u64| {
                    if *fault_count {
                        n.to_string()
                    } else {
                        compact(n)
                    }
                };
                match (mean_ms, threshold_ms) {
                    (Some(l), Some(t)) => format!("refused {}>{}", v(*l), v(u64::from(*t))),
                    _ => "refused: latency".into(),
                }
            }
            Verdict::RefusedRateLimit { .. } => "rate limit".into(),
            Verdict::RefusedOther { .. } => "refused: other".into(),
            Verdict::MigrationFailed { .. } => "migration failed".into(),
            Verdict::Promoted { .. } => "promoted".into(),
            Verdict::PingPong { residency_ms, .. } => match residency_ms {
                Some(ms) => format!("ping-pong {}", compact(*ms)),
                None => "ping-pong".into(),
            },
            Verdict::Quiet => "quiet".into(),
        }
    }

    /// A stable snake_case id (`stats --json`'s `verdict_kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::NotScanned { .. } => "not_scanned",
            Verdict::Cold { .. } => "cold",
            Verdict::Undecided { .. } => "undecided",
            Verdict::RefusedLatency { .. } => "refused_latency",
            Verdict::RefusedRateLimit { .. } => "refused_rate_limit",
            Verdict::RefusedOther { .. } => "refused_other",
            Verdict::MigrationFailed { .. } => "migration_failed",
            Verdict::Promoted { .. } => "promoted",
            Verdict::PingPong { .. } => "pingpong",
            Verdict::Quiet => "quiet",
        }
    }
}

fn secs(ms: u64) -> String {
    if ms >= 10_000 {
        format!("{} s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::NotScanned {
                for_ns,
                reason,
                skips,
            } => write!(
                f,
                "not scanned for {} ({reason}, {skips} skips since the last pass)",
                secs(for_ns / 1_000_000)
            ),
            Verdict::Cold { protected, faulted } => write!(
                f,
                "scanned, not touched (cold): {faulted} of {protected} protected pages faulted"
            ),
            Verdict::Undecided { faults, decisions } => write!(
                f,
                "touched, no tiering decision: {decisions} decisions for {faults} faults"
            ),
            Verdict::RefusedLatency {
                refused,
                decisions,
                mean_ms,
                threshold_ms,
                fault_count,
            } => {
                let v = |n: u64| if *fault_count { n.to_string() } else { secs(n) };
                let what = if *fault_count {
                    "fault count"
                } else {
                    "latency"
                };
                write!(f, "touched, refused: {what}")?;
                match (mean_ms, threshold_ms) {
                    (Some(l), Some(t)) => write!(f, " {} > {}", v(*l), v(u64::from(*t)))?,
                    (Some(l), None) => write!(f, " {}", v(*l))?,
                    _ => {}
                }
                write!(f, " ({refused} of {decisions} decisions)")
            }
            Verdict::RefusedRateLimit { refused, decisions } => {
                write!(
                    f,
                    "refused: rate limit ({refused} of {decisions} decisions)"
                )
            }
            Verdict::RefusedOther { refused, decisions } => write!(
                f,
                "refused: other, destination without memory ({refused} of {decisions} decisions)"
            ),
            Verdict::MigrationFailed { failed, tried } => {
                write!(f, "promoted, migration failed ({failed} of {tried} folios)")
            }
            Verdict::Promoted {
                promoted,
                decisions,
            } => write!(f, "promoted ({promoted} of {decisions} decisions)"),
            Verdict::PingPong {
                pingpong,
                promotions,
                residency_ms,
            } => {
                write!(f, "promoted, then demoted")?;
                if let Some(ms) = residency_ms {
                    write!(f, " after {}", secs(*ms))?;
                }
                write!(f, " (ping-pong): {pingpong} of {promotions} promotions")
            }
            Verdict::Quiet => write!(f, "no slow-tier page protected or faulted"),
        }
    }
}

/// The verdict on `s` at `end_ns` (the report's end, trace time). Stages
/// in order, the first that holds wins; "most" is more than half:
///
/// 1. **not scanned**: a skip since the latest pass (or with no pass seen),
///    and no pass for at least [`UNSCANNED_MIN_NS`] and at least half the
///    time the funnel was watched (first event to the end), over a VMA the
///    passes did not mostly cover (PTEs protected below half its pages,
///    when its size is known): a covered VMA's pages went on to the later
///    stages, which tell where they stopped. The reason is the most
///    frequent among the skips since the latest pass.
/// 2. **quiet**: nothing protected, no slow-tier fault.
/// 3. **cold**: pages protected, and fewer than half as many pages faulted.
/// 4. **undecided**: fewer tiering decisions than half the faults.
/// 5. **refused**: more than half the decisions refused; the reason with
///    most refusals names it (latency, with the mean refused latency and
///    the threshold in force; rate limit; other).
/// 6. **migration failed**: more than half the migrations tried failed.
/// 7. **promoted**; a caller that follows folios across tiers turns it
///    into **ping-pong** when most promotions were demoted again
///    ([`Verdict::with_pingpong`]).
pub fn judge(s: &Stages, end_ns: u64) -> Verdict {
    if let Some(v) = not_scanned(s, end_ns) {
        return v;
    }
    if s.ptes_protected == 0 && s.slow_faults == 0 {
        return Verdict::Quiet;
    }
    if s.ptes_protected > 0 && s.slow_fault_pages.saturating_mul(2) < s.ptes_protected {
        return Verdict::Cold {
            protected: s.ptes_protected,
            faulted: s.slow_fault_pages,
        };
    }
    let decisions = s.decisions();
    if decisions.saturating_mul(2) < s.slow_faults {
        return Verdict::Undecided {
            faults: s.slow_faults,
            decisions,
        };
    }
    if s.refused().saturating_mul(2) > decisions {
        return refused(s, decisions);
    }
    let tried = s.migrate_ok.saturating_add(s.migrate_fail);
    if s.migrate_fail.saturating_mul(2) > tried {
        return Verdict::MigrationFailed {
            failed: s.migrate_fail,
            tried,
        };
    }
    Verdict::Promoted {
        promoted: s.promoted,
        decisions,
    }
}

fn not_scanned(s: &Stages, end_ns: u64) -> Option<Verdict> {
    if s.vma_pages
        .is_some_and(|pages| s.ptes_protected.saturating_mul(2) >= pages)
    {
        return None;
    }
    let (reason, _) = s
        .skips
        .iter()
        .filter(|(_, k)| k.since_scan > 0)
        .max_by_key(|(r, k)| (k.since_scan, std::cmp::Reverse(**r)))?;
    let unscanned = s.unscanned_ns(end_ns);
    let watched = end_ns.saturating_sub(s.first_ns.unwrap_or(end_ns));
    if unscanned < UNSCANNED_MIN_NS || unscanned.saturating_mul(2) < watched {
        return None;
    }
    Some(Verdict::NotScanned {
        for_ns: unscanned,
        reason: crate::decode::skip_reason_name(*reason),
        skips: s.skips.values().map(|k| k.since_scan).sum(),
    })
}

fn refused(s: &Stages, decisions: u64) -> Verdict {
    let refused = s.refused();
    if s.rejected_latency >= s.rejected_rate_limit && s.rejected_latency >= s.rejected_other {
        Verdict::RefusedLatency {
            refused,
            decisions,
            mean_ms: s.refused_latency_mean_ms(),
            threshold_ms: s.threshold_ms,
            fault_count: false,
        }
    } else if s.rejected_rate_limit >= s.rejected_other {
        Verdict::RefusedRateLimit { refused, decisions }
    } else {
        Verdict::RefusedOther { refused, decisions }
    }
}

#[cfg(test)]
mod tests {
    use numa_ebpf_common::Outcome;

    use super::*;
    use crate::decode::fixtures::fault;

    const S: u64 = 1_000_000_000;
    const PID_INACTIVE: u32 = 4;

    /// Two passes of 16 MiB (4096 PTEs each) at 1 and 3 s, their pages
    /// faulted with `outcome`.
    fn scanned_and_faulted(outcome: Outcome, faults: u64) -> Stages {
        let mut s = Stages::default();
        s.scan(S, 4096);
        s.scan(3 * S, 4096);
        for i in 0..faults {
            let mut f = fault(i, i, 1500, outcome);
            f.ts_ns = 4 * S + i;
            s.fault(&f);
        }
        s
    }

    #[test]
    fn pid_inactive_skips_after_two_passes_are_not_scanned() {
        let mut s = scanned_and_faulted(Outcome::PromoteHot, 4096);
        for t in 0..120 {
            s.skip(5 * S + t * S / 3, PID_INACTIVE);
            s.skip(5 * S + t * S / 3, 6); // seq_completed, fewer
            if t % 2 == 0 {
                s.skip(5 * S + t * S / 3, PID_INACTIVE);
            }
        }
        let v = judge(&s, 45 * S);
        assert_eq!(v.kind(), "not_scanned");
        assert_eq!(
            v.to_string(),
            "not scanned for 42 s (pid_inactive, 300 skips since the last pass)"
        );
        // A pass at the end: the scanner is back, the pages were promoted.
        s.scan(44 * S, 0);
        assert_eq!(judge(&s, 45 * S).kind(), "promoted");
    }

    #[test]
    fn a_vma_the_passes_covered_is_judged_by_its_later_stages() {
        let mut s = scanned_and_faulted(Outcome::RejectLatency, 8192);
        for t in 0..100 {
            s.skip(5 * S + t * S / 3, PID_INACTIVE);
        }
        // A 32 MiB VMA: the two passes protected all its 8192 pages, and
        // the kernel refused them before it stopped scanning.
        s.vma_pages = Some(8192);
        assert_eq!(judge(&s, 45 * S).kind(), "refused_latency");
        // A 256 MiB one: 8192 of its 65536 pages protected, the rest never.
        s.vma_pages = Some(65536);
        assert_eq!(judge(&s, 45 * S).kind(), "not_scanned");
        // Its size unknown: the skips speak.
        s.vma_pages = None;
        assert_eq!(judge(&s, 45 * S).kind(), "not_scanned");
    }

    #[test]
    fn a_short_or_minor_silence_is_no_verdict() {
        let mut s = scanned_and_faulted(Outcome::PromoteHot, 8192);
        s.skip(4 * S, PID_INACTIVE);
        // 6 s unscanned: within a scan period.
        assert_eq!(judge(&s, 9 * S).kind(), "promoted");
        // 20 s unscanned of 100 s watched: less than half.
        s.first_ns = Some(0);
        s.last_scan_ns = Some(80 * S);
        assert_eq!(judge(&s, 100 * S).kind(), "promoted");
    }

    #[test]
    fn promoted_and_mostly_demoted_again_is_a_ping_pong() {
        use crate::model::lifecycle::Trips;
        let promoted = judge(&scanned_and_faulted(Outcome::PromoteHot, 8192), 5 * S);
        let mut trips = Trips {
            promotions: 100,
            pingpong: 50,
            ..Trips::default()
        };
        // Half is not most.
        assert_eq!(promoted.clone().with_pingpong(Some(&trips)), promoted);
        trips.pingpong = 51;
        trips.residency_ns.add(12 * S);
        let v = promoted.clone().with_pingpong(Some(&trips));
        assert_eq!(v.kind(), "pingpong");
        // 12 s falls in the bucket up to 2^34 ns.
        assert_eq!(v.short(), "ping-pong 17s");
        assert_eq!(
            v.to_string(),
            "promoted, then demoted after 17 s (ping-pong): 51 of 100 promotions"
        );
        // Only a promotion can be undone.
        let cold = judge(&scanned_and_faulted(Outcome::PromoteHot, 100), 5 * S);
        assert_eq!(cold.clone().with_pingpong(Some(&trips)), cold);
    }

    #[test]
    fn protected_and_untouched_is_cold() {
        let s = scanned_and_faulted(Outcome::PromoteHot, 100);
        let v = judge(&s, 5 * S);
        assert_eq!(
            v,
            Verdict::Cold {
                protected: 8192,
                faulted: 100
            }
        );
        assert_eq!(
            v.to_string(),
            "scanned, not touched (cold): 100 of 8192 protected pages faulted"
        );
    }

    #[test]
    fn refused_on_latency_shows_latency_and_threshold() {
        let mut s = scanned_and_faulted(Outcome::RejectLatency, 3000);
        let mut f = fault(1, 1, 1500, Outcome::PromoteHot);
        f.ts_ns = 4 * S;
        for _ in 0..1096 {
            s.fault(&f);
        }
        let mut slow = fault(2, 2, 5100, Outcome::RejectLatency);
        slow.threshold_ms = 1100;
        s.fault(&slow);
        let v = judge(&s, 5 * S);
        assert_eq!(v.kind(), "refused_latency");
        assert_eq!(v.short(), "refused 1.5s>1.1s");
        // (3000 * 1500 + 5100) / 3001 = 1501 ms; the latest threshold.
        assert_eq!(
            v.to_string(),
            "touched, refused: latency 1.5 s > 1.1 s (3001 of 4097 decisions)"
        );
        let rfc = v.with_hotness(crate::params::KernelHotness::FaultCount);
        assert_eq!(
            rfc.to_string(),
            "touched, refused: fault count 1501 > 1100 (3001 of 4097 decisions)"
        );
        assert_eq!(rfc.short(), "refused 1501>1100");
    }

    #[test]
    fn refused_by_the_rate_limit_or_other() {
        let s = scanned_and_faulted(Outcome::RejectRateLimit, 8192);
        let v = judge(&s, 5 * S);
        assert_eq!(v.kind(), "refused_rate_limit");
        assert_eq!(
            v.to_string(),
            "refused: rate limit (8192 of 8192 decisions)"
        );
        let s = scanned_and_faulted(Outcome::RejectOther, 8192);
        assert_eq!(judge(&s, 5 * S).kind(), "refused_other");
    }

    #[test]
    fn promoted_failed_undecided_and_quiet() {
        let s = scanned_and_faulted(Outcome::PromoteHot, 8192);
        let v = judge(&s, 5 * S);
        assert_eq!(v.to_string(), "promoted (8192 of 8192 decisions)");
        let mut s = scanned_and_faulted(Outcome::PromoteHot, 0);
        let mut f = fault(1, 1, 5, Outcome::PromoteHot);
        f.flags |= numa_ebpf_common::fault_flags::MIGRATE_TRIED;
        for i in 0..8192 {
            f.migrate_ok = u8::from(i % 4 == 0);
            s.fault(&f);
        }
        assert_eq!(
            judge(&s, 5 * S).to_string(),
            "promoted, migration failed (6144 of 8192 folios)"
        );
        let s = scanned_and_faulted(Outcome::NotTiering, 8192);
        assert_eq!(judge(&s, 5 * S).kind(), "undecided");
        assert_eq!(judge(&Stages::default(), 5 * S), Verdict::Quiet);
    }

    #[test]
    fn damaged_sums_saturate() {
        let mut s = Stages::default();
        s.scan(S, u64::MAX);
        s.scan(S, u64::MAX);
        let mut f = fault(1, 1, 5, Outcome::RejectLatency);
        (f.nr_pages, f.kernel_latency_ms) = (u32::MAX, u32::MAX);
        for _ in 0..3 {
            s.fault(&f);
        }
        assert_eq!(s.ptes_protected, u64::MAX);
        assert_eq!(judge(&s, 2 * S).kind(), "cold");
    }
}
