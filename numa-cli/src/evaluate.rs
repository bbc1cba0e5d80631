//! `numatrace shadow` (live) and `numatrace replay` (from a trace): the same
//! shadow engine, fed by either source, printed by the same code
//! (`numa_render::evaluate`).
use std::{io::Write, path::Path, process::ExitCode, time::Duration};

use anyhow::{bail, Context, Result};

use crate::{
    cli::{ModelArgs, ReplayArgs, ScoreArgs, ShadowArgs, TruthSource},
    progress::Output::AtEnd,
};
use numa_core::{
    damon,
    model::{
        funnel::Watch,
        policy::{self, KernelDefaults},
        scorecard::{Promotions, Scorecard},
        shadow::Shadow,
    },
    sink::Sink,
    trace,
};
use numa_render::evaluate::{
    write_csv, write_human, write_sweep_human, write_sweep_json, Interval, Output,
};

fn emit(o: &Output, a: &ModelArgs) -> Result<()> {
    let mut buf = Vec::new();
    if a.json {
        serde_json::to_writer_pretty(&mut buf, o)?;
        writeln!(buf)?;
    } else if a.csv {
        write_csv(o.shadow, &mut buf)?;
    } else {
        write_human(o.shadow, &mut buf)?;
        numa_render::stats::print_funnel(&o.funnel, o.skips_observable, &mut buf)?;
        if let Some(card) = o.scorecard {
            numa_render::scorecard::write_human(card, &mut buf)?;
        }
    }
    write_output(a, &buf)
}

/// Writes a finished report to `--output`, or to stdout without it.
fn write_output(a: &ModelArgs, buf: &[u8]) -> Result<()> {
    crate::write_output(a.output.as_deref(), buf)
}

pub(crate) fn shadow(args: &ShadowArgs) -> Result<ExitCode> {
    if let Some(path) = &args.record {
        numa_source::check_new_trace(path, args.overwrite)?;
        if let Some(out) = &args.models.output {
            if out == path {
                bail!(
                    "-o {} is also the --record trace: the report would replace the trace; \
                     name two files",
                    out.display()
                );
            }
            numa_host::fs::check_not_input(Some(out), &[path])?;
        }
    }
    let probes = numa_probe::session::attach(&args.live_truth.options(&args.probe)?)?;
    let probes_header = numa_probe::session::header(&probes);
    let k = KernelDefaults::from_host(&probes_header.tunables, probes_header.params.as_ref());
    let mut judging = match args.live_truth.truth {
        Some(_) => Some(Judging::live(
            &probes_header,
            args.models.sel.policies(&k)?,
        )?),
        None => None,
    };
    let mut engine = Shadow::new(args.models.sel.policies(&k)?, args.models.top);
    engine.set_map_plan(probes_header.map_plan.as_ref(), probes_header.map_bytes);
    engine.set_toptier_mask(probes.params.toptier_mask);
    let mut funnel = Watch::new(probes.params.toptier_mask);
    let plan = probes.plan.clone();
    let reason = {
        let mut interval = Interval::new(
            &mut engine,
            args.interval.map_or(0, |s| (s * 1e9) as u64),
            args.models.json,
            std::io::stderr(),
        );
        let output = args.record.as_deref().map(|path| numa_source::Recording {
            path,
            header: &probes_header,
            overwrite: args.overwrite,
        });
        let mut sinks: Vec<&mut dyn Sink> = vec![&mut interval, &mut funnel];
        if let Some(j) = judging.as_mut() {
            sinks.extend(j.sinks());
        }
        args.probe
            .live(probes, Duration::from_secs(1))
            .run_recorded(args.probe.report_until(), output, &mut sinks)?
            .reason
    };
    // The kdamond stopped with the probes: what it cost is measured.
    let card = judging
        .map(|j| j.judge(&TruthSource::FromTrace, &args.score))
        .transpose()?;
    log::info!("shadow stopped: {}", reason.describe());
    if let (Some(out), Some(rec)) = (&args.models.output, &args.record) {
        // The same file by another name than the one checked at the start.
        numa_host::fs::check_not_input(Some(out), &[rec]).with_context(|| {
            format!(
                "the report is in the trace: `numatrace replay {}`",
                rec.display()
            )
        })?;
    }
    emit(
        &Output::new(
            &engine.report(),
            &funnel,
            Some(&plan),
            probes_header.params.as_ref(),
        )
        .with_scorecard(card.as_ref()),
        &args.models,
    )?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn replay(args: &ReplayArgs) -> Result<ExitCode> {
    let inputs: Vec<&Path> = std::iter::once(args.trace.as_path())
        .chain(args.truth.as_ref().and_then(TruthSource::file))
        .collect();
    numa_host::fs::check_not_input(args.models.output.as_deref(), &inputs)?;
    let header = trace::Reader::open(&args.trace)?.header;
    let k = KernelDefaults::from_host(&header.tunables, header.params.as_ref());
    if let Some(sweep) = &args.sweep {
        return run_sweep(args, sweep, &k);
    }
    let mut engine = Shadow::new(args.models.sel.policies(&k)?, args.models.top);
    engine.set_map_plan(header.map_plan.as_ref(), header.map_bytes);
    engine.set_toptier_mask(header.params.as_ref().map_or(1, |p| p.toptier_mask));
    let mut funnel = Watch::new(header.params.as_ref().map_or(1, |p| p.toptier_mask));
    let mut judging = judging(args, &header, || args.models.sel.policies(&k))?;
    read_with(args, vec![&mut engine, &mut funnel], judging.as_mut())?;
    let card = scorecard(judging, args)?;
    emit(
        &Output::new(
            &engine.report(),
            &funnel,
            header.attach_plan.as_ref(),
            header.params.as_ref(),
        )
        .with_scorecard(card.as_ref()),
        &args.models,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// With `--truth`, the scorecard's first pass, over its own instances of
/// the models `models` builds, and with `from-trace` the trace's DAMON
/// records, read in the same pass.
pub(crate) struct Judging {
    promotions: Promotions,
    damon: Option<damon::Collector>,
}

impl Judging {
    pub(crate) fn new(
        truth: &TruthSource,
        trace_path: &Path,
        header: &trace::Header,
        models: Vec<Box<dyn policy::Policy>>,
    ) -> Result<Judging> {
        let damon = match truth {
            TruthSource::File(_) => None,
            TruthSource::FromTrace => Some(damon_collector(trace_path, header)?),
        };
        Ok(Judging {
            promotions: Promotions::new(header, models)?,
            damon,
        })
    }

    /// A live run's, against the DAMON records of the kdamond its session
    /// started.
    pub(crate) fn live(
        header: &trace::Header,
        models: Vec<Box<dyn policy::Policy>>,
    ) -> Result<Judging> {
        let info = header
            .damon
            .as_ref()
            .context("--truth damon: the probe session started no kdamond")?;
        Ok(Judging {
            promotions: Promotions::new(header, models)?,
            damon: Some(damon::Collector::new(info.spec.clone())),
        })
    }

    /// The first pass's sinks.
    pub(crate) fn sinks(&mut self) -> Vec<&mut dyn Sink> {
        let mut v: Vec<&mut dyn Sink> = vec![&mut self.promotions];
        if let Some(d) = &mut self.damon {
            v.push(d);
        }
        v
    }

    /// The promotions read judged against the truth.
    pub(crate) fn judge(self, truth: &TruthSource, score: &ScoreArgs) -> Result<Scorecard> {
        match (truth, &self.damon) {
            (TruthSource::File(path), _) => self
                .promotions
                .score(crate::open_truth(path)?, &score.rules())
                .with_context(|| format!("--truth {}", path.display())),
            (TruthSource::FromTrace, Some(d)) => self.promotions.score_damon(d, &score.rules()),
            (TruthSource::FromTrace, None) => {
                bail!("--truth from-trace without the trace's DAMON records")
            }
        }
    }
}

/// The trace's DAMON records as a truth, when it has them.
fn damon_collector(trace_path: &Path, header: &trace::Header) -> Result<damon::Collector> {
    let info = header.damon.as_ref().with_context(|| {
        format!(
            "--truth from-trace: {} has no DAMON records (it was recorded without --truth \
             damon): record the workload with --truth damon, or give a truth file",
            trace_path.display()
        )
    })?;
    Ok(damon::Collector::new(info.spec.clone()))
}

/// With `--truth`, the scorecard's first pass over the models `models`
/// builds.
fn judging(
    args: &ReplayArgs,
    header: &trace::Header,
    models: impl FnOnce() -> Result<Vec<Box<dyn policy::Policy>>>,
) -> Result<Option<Judging>> {
    match &args.truth {
        Some(t) => Ok(Some(Judging::new(t, &args.trace, header, models()?)?)),
        None => Ok(None),
    }
}

/// With `--truth`, the promotions read from the trace judged against it.
fn scorecard(j: Option<Judging>, args: &ReplayArgs) -> Result<Option<Scorecard>> {
    let (Some(j), Some(truth)) = (j, &args.truth) else {
        return Ok(None);
    };
    j.judge(truth, &args.score).map(Some)
}

/// Reads the trace into `sinks` and, with `--truth`, into the
/// scorecard's first pass in the same pass.
fn read_with<'a>(
    args: &ReplayArgs,
    mut sinks: Vec<&'a mut dyn Sink>,
    judging: Option<&'a mut Judging>,
) -> Result<()> {
    if let Some(j) = judging {
        sinks.extend(j.sinks());
    }
    crate::read_trace(&args.trace, AtEnd, &mut sinks)
}

fn run_sweep(args: &ReplayArgs, sweep: &str, k: &KernelDefaults) -> Result<ExitCode> {
    let (param, values) = sweep
        .split_once('=')
        .context("--sweep takes param=v1,v2,... e.g. threshold=1e4,1e5,1e6")?;
    let base = args
        .models
        .sel
        .models
        .first()
        .cloned()
        .unwrap_or_else(|| "fault-count".into());
    let (name, opts) = base.split_once(':').unwrap_or((&base, ""));
    let specs = sweep_specs(name, opts, param, values)?;
    if specs.is_empty() {
        bail!("--sweep {sweep}: no values");
    }
    let d = args.models.sel.defaults();
    let models = || {
        specs
            .iter()
            .map(|s| policy::build(s, &d, k))
            .collect::<Result<Vec<_>>>()
    };
    let mut engine = Shadow::new(models()?, args.models.top);
    let header = trace::Reader::open(&args.trace)?.header;
    engine.set_toptier_mask(header.params.as_ref().map_or(1, |p| p.toptier_mask));
    let mut judging = judging(args, &header, models)?;
    read_with(args, vec![&mut engine], judging.as_mut())?;
    let card = scorecard(judging, args)?;
    let r = engine.report();
    let mut buf = Vec::new();
    if args.models.json {
        write_sweep_json(&r, param, card.as_ref(), &mut buf)?;
    } else if args.models.csv {
        write_csv(&r, &mut buf)?;
    } else {
        write_sweep_human(&r, name, param, &mut buf)?;
        if let Some(card) = &card {
            numa_render::scorecard::write_human(card, &mut buf)?;
        }
    }
    write_output(&args.models, &buf)?;
    Ok(ExitCode::SUCCESS)
}

/// One model spec per sweep value: the base model's options with `param`
/// set to that value.
fn sweep_specs(name: &str, opts: &str, param: &str, values: &str) -> Result<Vec<String>> {
    let mut specs = Vec::new();
    for v in values.split(',').filter(|v| !v.is_empty()) {
        let finite = v.trim().parse::<f64>().ok().filter(|x| x.is_finite());
        if finite.is_none() {
            bail!("--sweep: value {v:?} is not a finite number (1e4 and 10000 both work)");
        }
        let mut o: Vec<&str> = opts
            .split(',')
            .filter(|o| !o.is_empty() && !o.starts_with(&format!("{param}=")))
            .collect();
        let kv = format!("{param}={}", v.trim());
        o.push(&kv);
        specs.push(format!("{name}:{}", o.join(",")));
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_values_must_be_finite_numbers() {
        let specs = sweep_specs("fault-count", "counter=global", "threshold", "1e4, 1e5")
            .expect("two values");
        assert_eq!(
            specs,
            [
                "fault-count:counter=global,threshold=1e4",
                "fault-count:counter=global,threshold=1e5"
            ]
        );
        for bad in ["nan", "inf", "1e4,-inf", "ten"] {
            let err = sweep_specs("fault-count", "", "threshold", bad)
                .expect_err(bad)
                .to_string();
            assert!(err.contains("finite number"), "{bad}: {err}");
        }
    }
}
