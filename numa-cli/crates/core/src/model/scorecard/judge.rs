//! The second pass (the truth file's accesses, window by window) and the
//! scores it leaves.
use std::io::Read;

use anyhow::Result;
use serde::Serialize;

use super::{Page, Promotions, Rules, AFTER, BEFORE, MAX_RULES, NEVER};
use crate::{
    damon::{self, Region},
    truth::{TruthReader, Window},
};

/// Every policy judged against the truth, under every hot rule.
#[derive(Debug, Clone, Serialize)]
pub struct Scorecard {
    pub windows: usize,
    /// The truth windows' mean length.
    pub window_ms: f64,
    /// The largest uncertainty of a window's bounds on the trace's clock.
    pub clock_err_ms: f64,
    pub horizon_s: f64,
    /// User accesses in the truth over the trace's span, those to pages
    /// that were on the slow tier, and those at slow-tier frames.
    pub accesses: u64,
    pub slow_page_accesses: u64,
    pub slow_accesses: u64,
    /// Slow-tier pages followed, and the most [`super::PAGE_BUDGET_BYTES`]
    /// allows.
    pub pages: usize,
    pub max_pages: usize,
    /// Pages past that bound (not judged).
    pub untracked_pages: u64,
    /// Faults on a frame after the kernel moved its page away (not
    /// followed).
    pub reused_frames: u64,
    /// The trace's sample of the slow tier: one frame in this many.
    pub sample_one_in: u64,
    pub shares: Vec<SlowShare>,
    pub rules: Vec<RuleScores>,
    /// The truth is DAMON's sample, not every access: its resolution and
    /// cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damon: Option<damon::Summary>,
}

/// A policy's promotions and the slow tier's share of the accesses.
#[derive(Debug, Clone, Serialize)]
pub struct SlowShare {
    pub policy: String,
    pub promoted_pages: u64,
    /// Of all user accesses.
    pub slow_access_share: Option<f64>,
    /// Of the accesses to pages that were on the slow tier (where the
    /// policies differ; the rest are DRAM's under every policy).
    pub slow_page_access_share: Option<f64>,
    /// Measured (the kernel as it ran), or projected (a model).
    pub measured: bool,
}

/// The scores under one hot rule.
#[derive(Debug, Clone, Serialize)]
pub struct RuleScores {
    /// Accesses in one window that make a page hot there.
    pub hot_accesses: u32,
    /// Pages hot on the slow tier, and those whose horizon the truth
    /// covers (recall's denominator).
    pub hot_pages: u64,
    pub hot_judged: u64,
    pub policies: Vec<PolicyScore>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyScore {
    pub policy: String,
    /// Promotions whose horizon the truth covers.
    pub judged: u64,
    /// Of those, hot within the horizon after.
    pub precise: u64,
    pub precision: Option<f64>,
    /// Hot pages promoted within the horizon of their first hot window.
    pub recalled: u64,
    pub recall: Option<f64>,
    /// Judged promotions hot within the horizon before, not after.
    pub bursts: u64,
    /// Hot pages promoted after their first hot window, and the median
    /// time from that window's start to the promotion.
    pub promoted_after_hot: u64,
    pub to_promotion_p50_ms: Option<f64>,
}

/// Accesses counted in the second pass.
struct Tally {
    accesses: u64,
    /// To pages that were on the slow tier: at slow frames, and at the
    /// DRAM frames of the pages the kernel promoted.
    slow_pages: u64,
    slow: u64,
    /// Per policy, the accesses it leaves on the slow tier (projected; the
    /// kernel's entry is the measured `slow`).
    slow_by: Vec<u64>,
}

fn ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

impl Page {
    /// An access count `a` of this page in window `w`, at its slow frame
    /// or not.
    fn hot(&mut self, w: &Window, a: u64, on_slow: bool, rules: &Rules) {
        for (r, &need) in rules.hot_accesses.iter().enumerate() {
            if a < u64::from(need) {
                continue;
            }
            if on_slow && self.first_hot_ns[r] == NEVER {
                self.first_hot_ns[r] = w.start_ns;
            }
            for (i, &p) in self.promoted_ns.iter().enumerate() {
                let near = if p == NEVER {
                    0
                } else if w.start_ns >= p {
                    if w.start_ns - p < rules.horizon_ns {
                        AFTER
                    } else {
                        0
                    }
                } else if p - w.start_ns <= rules.horizon_ns {
                    BEFORE
                } else {
                    0
                };
                self.hot_near[i * MAX_RULES + r] |= near;
            }
        }
    }
}

impl Promotions {
    /// Reads the truth and scores every policy under `rules`.
    pub fn score<R: Read>(self, mut truth: TruthReader<R>, rules: &Rules) -> Result<Scorecard> {
        let windows = truth.windows.clone();
        self.score_with(windows, rules, None, |p, t, within| {
            while let Some(c) = truth.next_count()? {
                // next_count checked the window index against the file's.
                if let Some(w) = within[c.window as usize] {
                    p.count(t, &w, u64::from(c.pfn), c.accesses(), rules);
                }
            }
            Ok(())
        })
    }

    /// Scores every policy under `rules` against DAMON's sampled truth:
    /// each page of a region takes the region's count of accessed samples
    /// in the aggregation as its accesses there.
    pub fn score_damon(self, truth: &damon::Collector, rules: &Rules) -> Result<Scorecard> {
        let mut tops: Vec<u64> = self.at_top.keys().copied().collect();
        tops.sort_unstable();
        let windows = truth.windows().to_vec();
        self.score_with(windows, rules, truth.summary(), |p, t, within| {
            for r in truth.regions().iter().filter(|r| r.nr_accesses > 0) {
                if let Some(w) = within[r.window as usize] {
                    p.count_range(t, &w, r, rules, &tops);
                }
            }
            Ok(())
        })
    }

    /// The windows within the trace's span, the truth's counts read into
    /// them by `read`, and the scores they leave.
    fn score_with(
        mut self,
        windows: Vec<Window>,
        rules: &Rules,
        damon: Option<damon::Summary>,
        read: impl FnOnce(&mut Self, &mut Tally, &[Option<Window>]) -> Result<()>,
    ) -> Result<Scorecard> {
        let mut t = Tally {
            accesses: 0,
            slow_pages: 0,
            slow: 0,
            slow_by: vec![0; self.names.len()],
        };
        let within: Vec<Option<Window>> = windows.iter().map(|w| self.within_trace(w)).collect();
        read(&mut self, &mut t, &within)?;
        t.slow_by[0] = t.slow;
        let used: Vec<Window> = within.into_iter().flatten().collect();
        let mut card = self.judge(&used, rules, &t);
        card.damon = damon;
        Ok(card)
    }

    /// A region's count for each of its pages: those the scorecard follows
    /// (its sample of the slow frames, the top-tier frames the kernel
    /// promoted to, `tops` sorted) one by one, the others in bulk as
    /// [`count`](Self::count) would take them.
    fn count_range(&mut self, t: &mut Tally, w: &Window, r: &Region, rules: &Rules, tops: &[u64]) {
        let a = u64::from(r.nr_accesses);
        let (slow, followed) = self.plan.followed_in(r.start_pfn, r.end_pfn);
        let (lo, hi) = (
            tops.partition_point(|&p| p < r.start_pfn),
            tops.partition_point(|&p| p < r.end_pfn),
        );
        let top = &tops[lo..hi];
        for &pfn in followed.iter().chain(top) {
            self.count(t, w, pfn, a, rules);
        }
        let rest_slow = slow - followed.len() as u64;
        let rest_top = (r.end_pfn - r.start_pfn)
            .saturating_sub(slow)
            .saturating_sub(top.len() as u64);
        t.accesses += a * (rest_slow + rest_top);
        t.slow += a * rest_slow;
        t.slow_pages += a * rest_slow;
        t.slow_by.iter_mut().for_each(|s| *s += a * rest_slow);
    }

    /// `w` if it lies within the trace's span.
    fn within_trace(&self, w: &Window) -> Option<Window> {
        (w.start_ns >= self.started_ns && w.end_ns <= self.last_ns).then_some(*w)
    }

    fn count(&mut self, t: &mut Tally, w: &Window, pfn: u64, a: u64, rules: &Rules) {
        t.accesses += a;
        let on_slow = self.is_slow(pfn);
        if on_slow {
            t.slow += a;
            t.slow_pages += a;
        }
        let Some(page) = self.owner(pfn, on_slow, w) else {
            // No policy moves this page: where it is serves it for all.
            if on_slow {
                t.slow_by.iter_mut().for_each(|s| *s += a);
            }
            return;
        };
        if !on_slow {
            t.slow_pages += a;
        }
        // At the DRAM frame the accesses came after the kernel's move: a
        // policy that promoted no later serves them from DRAM too.
        let moved_at = page.moved.filter(|_| !on_slow).map_or(0, |(_, at)| at);
        for (s, &p) in t.slow_by.iter_mut().zip(page.promoted_ns.iter()) {
            if p > w.start_ns && p > moved_at {
                *s += a;
            }
        }
        // The page began the window on the slow tier: its accesses at the
        // new frame in the window of its promotion count there (the access
        // that faulted was the slow tier's, and a page promoted on its
        // first access has no other).
        let began_slow = on_slow || moved_at > w.start_ns;
        page.hot(w, a, began_slow, rules);
    }

    /// The followed page an access at `pfn` in `w` is of: the one at its
    /// slow frame until the kernel moved it, then at its top-tier frame
    /// until reclaim demoted it from there.
    fn owner(&mut self, pfn: u64, on_slow: bool, w: &Window) -> Option<&mut Page> {
        if on_slow {
            let page = self.page(pfn)?;
            return match page.moved {
                Some((_, at)) if at <= w.start_ns => None,
                _ => Some(page),
            };
        }
        let slow = *self.at_top.get(&pfn)?;
        let page = self.pages.get_mut(&slow)?;
        let (_, at) = page.moved?;
        (at < w.end_ns && w.start_ns < page.left_ns).then_some(page)
    }

    fn judge(&self, windows: &[Window], rules: &Rules, t: &Tally) -> Scorecard {
        let start = windows.first().map_or(0, |w| w.start_ns);
        let end = windows.last().map_or(0, |w| w.end_ns);
        let shares = self
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| SlowShare {
                policy: name.clone(),
                promoted_pages: self
                    .pages
                    .values()
                    .filter(|p| p.promoted_ns[i] != NEVER)
                    .count() as u64,
                slow_access_share: ratio(t.slow_by[i], t.accesses),
                slow_page_access_share: ratio(t.slow_by[i], t.slow_pages),
                measured: i == 0,
            })
            .collect();
        let rules_out = rules
            .hot_accesses
            .iter()
            .enumerate()
            .map(|(r, &need)| self.rule_scores(r, need, (start, end), rules.horizon_ns))
            .collect();
        Scorecard {
            windows: windows.len(),
            window_ms: ratio(end.saturating_sub(start), windows.len() as u64).unwrap_or(0.0) / 1e6,
            clock_err_ms: windows.iter().map(|w| w.clock_err_ns).max().unwrap_or(0) as f64 / 1e6,
            horizon_s: rules.horizon_ns as f64 / 1e9,
            accesses: t.accesses,
            slow_page_accesses: t.slow_pages,
            slow_accesses: t.slow,
            pages: self.pages.len(),
            max_pages: self.max_pages,
            untracked_pages: self.untracked,
            reused_frames: self.reused_frames,
            sample_one_in: self.plan.rate(),
            shares,
            rules: rules_out,
            damon: None,
        }
    }

    fn rule_scores(
        &self,
        r: usize,
        need: u32,
        (start, end): (u64, u64),
        horizon: u64,
    ) -> RuleScores {
        let hot = |p: &&Page| p.first_hot_ns[r] != NEVER;
        let covered = |p: &&Page| p.first_hot_ns[r].saturating_add(horizon) <= end;
        let hot_judged = self.pages.values().filter(hot).filter(covered).count() as u64;
        RuleScores {
            hot_accesses: need,
            hot_pages: self.pages.values().filter(hot).count() as u64,
            hot_judged,
            policies: (0..self.names.len())
                .map(|i| self.policy_score(i, r, (start, end), horizon, hot_judged))
                .collect(),
        }
    }

    fn policy_score(
        &self,
        i: usize,
        r: usize,
        (start, end): (u64, u64),
        horizon: u64,
        hot_judged: u64,
    ) -> PolicyScore {
        let mut s = PolicyScore {
            policy: self.names[i].clone(),
            ..PolicyScore::default()
        };
        let mut delays = Vec::new();
        for page in self.pages.values() {
            let (t, hot) = (page.promoted_ns[i], page.first_hot_ns[r]);
            if t != NEVER && t >= start && t.saturating_add(horizon) <= end {
                s.judged += 1;
                let near = page.hot_near[i * MAX_RULES + r];
                if near & AFTER != 0 {
                    s.precise += 1;
                } else if near & BEFORE != 0 {
                    s.bursts += 1;
                }
            }
            if hot != NEVER && hot.saturating_add(horizon) <= end {
                s.recalled += u64::from(t <= hot.saturating_add(horizon));
                if t != NEVER && t >= hot {
                    delays.push(t - hot);
                }
            }
        }
        s.precision = ratio(s.precise, s.judged);
        s.recall = ratio(s.recalled, hot_judged);
        s.promoted_after_hot = delays.len() as u64;
        let mid = delays.len() / 2;
        if !delays.is_empty() {
            s.to_promotion_p50_ms = Some(*delays.select_nth_unstable(mid).1 as f64 / 1e6);
        }
        s
    }
}
