//! Shell completions and man pages, generated from the clap definitions
//! that `--help` prints, so the three never disagree.
use std::{io::Write, path::Path, process::ExitCode};

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::{cli::Cli, OUTPUT_MODE};

pub(crate) fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut Cli::command(), "numatrace", &mut out);
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `numatrace.1` and one page per visible command, named as git
/// and perf name theirs (`numatrace-top.1`, `numatrace-workload-hot-chunks.1`).
pub(crate) fn manpages(dir: &Path) -> Result<ExitCode> {
    let pages = render_all(&Cli::command())?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, page) in &pages {
        let path = dir.join(format!("{name}.1"));
        numa_host::fs::write_atomic(&path, page, OUTPUT_MODE)
            .with_context(|| format!("writing the man page {}", path.display()))?;
    }
    println!("{} man pages in {}", pages.len(), dir.display());
    Ok(ExitCode::SUCCESS)
}

/// (page name, roff) for `cmd` and every visible subcommand under it.
fn render_all(cmd: &clap::Command) -> Result<Vec<(String, Vec<u8>)>> {
    let mut pages = Vec::new();
    render(cmd, None, &mut pages)?;
    Ok(pages)
}

fn render(
    cmd: &clap::Command,
    parent: Option<&str>,
    pages: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    let name = match parent {
        Some(p) => format!("{p}-{}", cmd.get_name()),
        None => cmd.get_name().to_owned(),
    };
    let mut roff = Vec::new();
    let named = cmd
        .clone()
        .name(name.clone())
        .bin_name(name.replace('-', " "));
    clap_mangen::Man::new(named)
        .render(&mut roff)
        .with_context(|| format!("rendering the man page of {name}"))?;
    pages.push((name.clone(), roff));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        render(sub, Some(&name), pages)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command has a page, and each page names every long option
    /// its command's --help lists.
    #[test]
    fn a_page_per_command_with_every_option_of_its_help() {
        let root = Cli::command();
        let pages = render_all(&root).expect("pages");
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        for want in [
            "numatrace",
            "numatrace-top",
            "numatrace-promote",
            "numatrace-workload-hot-chunks",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert!(
            !names.contains(&"numatrace-manpages"),
            "hidden commands get no page"
        );
        for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = format!("numatrace-{}", sub.get_name());
            let (_, page) = pages.iter().find(|(n, _)| *n == name).expect("page");
            // roff escapes '-' as '\-'.
            let page = String::from_utf8_lossy(page).replace("\\-", "-");
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(long) = arg.get_long() {
                    assert!(
                        page.contains(&format!("--{long}")),
                        "{name}: --{long} missing"
                    );
                }
            }
        }
    }

    #[test]
    fn completions_know_the_commands() {
        let mut out = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "numatrace",
            &mut out,
        );
        let script = String::from_utf8(out).expect("utf-8");
        for word in ["top", "promote", "--replay", "hot-chunks"] {
            assert!(script.contains(word), "{word} missing");
        }
    }
}
