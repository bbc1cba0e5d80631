//! Which package of a series to fetch, and fetching it: `apt-cache search`
//! and `policy` over the right package lists, `apt-get download` of the
//! image and the packages it is split into.
//!
//! Debian 12's kernels are in the host's own lists. 7.x is only in Debian
//! unstable (sid): its lists are read through a private apt configuration
//! under the cache (`apt/sid/`: a `sources.list` naming the host's Debian
//! mirror with suite `sid`, the lists, apt's cache), passed with `-o` on
//! every call. The host's sources, lists and installed packages are never
//! touched.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::Series;
use crate::cmd;
use crate::host::{apt_get, Setup};

/// Package lists a series is found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lists {
    /// The host's own (`/etc/apt/sources.list*`).
    Host,
    /// Debian unstable, through the private configuration.
    Sid,
}

/// The keyring Debian's archive (sid included) is signed with.
const ARCHIVE_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// The newest package of a series and what to download for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Candidate {
    pub package: String,
    pub version: String,
    /// `name=version` of the image and the packages it is split into.
    pub downloads: Vec<String>,
}

/// apt over one set of lists: no options for the host's, the private
/// configuration's `-o` options for sid's.
struct Apt {
    private: Option<PathBuf>,
}

impl Apt {
    fn new(lists: Lists) -> Result<Apt> {
        let private = match lists {
            Lists::Host => None,
            Lists::Sid => Some(super::cache_root()?.join("apt/sid")),
        };
        Ok(Apt { private })
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = if program == "apt-get" {
            apt_get()
        } else {
            Command::new(program)
        };
        if let Some(dir) = &self.private {
            for (key, value) in [
                ("Dir::Etc::SourceList", dir.join("sources.list")),
                ("Dir::Etc::SourceParts", PathBuf::from("/dev/null")),
                ("Dir::State::Lists", dir.join("lists")),
                ("Dir::Cache", dir.join("cache")),
            ] {
                cmd.arg("-o").arg(format!("{key}={}", value.display()));
            }
            // apt's sandbox user `_apt` cannot enter root's home directory.
            cmd.args(["-o", "APT::Sandbox::User=root"]);
        }
        cmd
    }

    /// The host's lists: `apt-get update` once per process. Sid's: write
    /// the private configuration and update it (sid changes daily and
    /// drops superseded packages, so old lists point at missing files).
    fn update(&self, setup: &mut Setup) -> Result<()> {
        let Some(dir) = &self.private else {
            return setup.apt_update();
        };
        if !Path::new(ARCHIVE_KEYRING).is_file() {
            bail!("{ARCHIVE_KEYRING} is missing: apt-get install debian-archive-keyring");
        }
        let mirror = host_debian_mirror()?;
        for sub in ["lists/partial", "cache/archives/partial"] {
            let path = dir.join(sub);
            fs::create_dir_all(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
        }
        let sources = dir.join("sources.list");
        fs::write(
            &sources,
            format!("deb [signed-by={ARCHIVE_KEYRING}] {mirror} sid main\n"),
        )
        .with_context(|| format!("cannot write {}", sources.display()))?;
        cmd::run(self.command("apt-get").args(["update", "-q"])).with_context(|| {
            format!(
                "cannot read Debian sid's package lists from {mirror} (private apt configuration {})",
                sources.display()
            )
        })?;
        setup.did(&format!("apt-get update of Debian sid's lists ({mirror})"));
        Ok(())
    }

    /// Package names matching `pattern`.
    fn search(&self, pattern: &str) -> Result<Vec<String>> {
        let out = cmd::output(
            self.command("apt-cache")
                .args(["search", "--names-only"])
                .arg(pattern),
        )?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect())
    }

    fn candidate_version(&self, package: &str) -> Result<String> {
        let policy = cmd::output(self.command("apt-cache").arg("policy").arg(package))?;
        policy
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Candidate:"))
            .map(|v| v.trim().to_string())
            .find(|v| v != "(none)")
            .with_context(|| format!("apt-cache policy {package} shows no candidate version"))
    }
}

/// The newest package of `series` in its lists, or None if they offer none.
pub(super) fn resolve(series: Series, setup: &mut Setup) -> Result<Option<Candidate>> {
    let apt = Apt::new(series.lists())?;
    let pattern = series.search_pattern();
    let mut names = Vec::new();
    if apt.private.is_none() {
        names = apt.search(pattern)?;
    }
    // Fresh machines have empty or stale lists.
    if names.is_empty() {
        apt.update(setup)?;
        names = apt.search(pattern)?;
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let Some(package) = series.pick(&names) else {
        return Ok(None);
    };
    let version = apt.candidate_version(&package)?;
    let show = cmd::output(
        apt.command("apt-cache")
            .arg("show")
            .arg(format!("{package}={version}")),
    )?;
    let mut downloads = vec![format!("{package}={version}")];
    downloads.extend(
        split_parts(&package, &show)
            .into_iter()
            .map(|(name, v)| format!("{name}={}", v.unwrap_or_else(|| version.clone()))),
    );
    Ok(Some(Candidate {
        package,
        version,
        downloads,
    }))
}

/// `apt-get download` of the candidate's packages into `dir`.
pub(super) fn download(series: Series, candidate: &Candidate, dir: &Path) -> Result<()> {
    let apt = Apt::new(series.lists())?;
    cmd::run(
        apt.command("apt-get")
            .current_dir(dir)
            .args(["download", "-q"])
            // The host lists' sandbox user cannot write into root's cache.
            .args(["-o", "APT::Sandbox::User=root"])
            .args(&candidate.downloads),
    )
    .with_context(|| format!("cannot download {}", candidate.downloads.join(" ")))
}

/// The packages a split image depends on for its kernel, modules and base
/// files (`linux-{binary,modules,base}-<release>`), with the version the
/// dependency pins, from `apt-cache show` of the image. Empty for a
/// single-package image.
fn split_parts(image: &str, show: &str) -> Vec<(String, Option<String>)> {
    let Some(release) = image.strip_prefix("linux-image-") else {
        return Vec::new();
    };
    let release = release.strip_suffix("-unsigned").unwrap_or(release);
    let Some(depends) = show.lines().find_map(|l| l.strip_prefix("Depends:")) else {
        return Vec::new();
    };
    depends
        .split(',')
        .filter_map(|dep| {
            // The first alternative of `a (= 1) | b`.
            let dep = dep.split('|').next()?.trim();
            let (name, rest) = dep.split_once(' ').unwrap_or((dep, ""));
            let part = ["linux-binary-", "linux-modules-", "linux-base-"]
                .iter()
                .find_map(|p| name.strip_prefix(p))?;
            (part == release).then_some(())?;
            let pinned = rest
                .trim()
                .strip_prefix("(=")
                .and_then(|v| v.strip_suffix(')'))
                .map(|v| v.trim().to_string());
            Some((name.to_string(), pinned))
        })
        .collect()
}

/// The Debian mirror the host's apt sources use (first match wins).
fn host_debian_mirror() -> Result<String> {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut parts: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "list" || x == "sources"))
            .collect();
        parts.sort();
        files.extend(parts);
    }
    files
        .iter()
        .filter_map(|path| {
            let text = fs::read_to_string(path).ok()?;
            let deb822 = path.extension().is_some_and(|x| x == "sources");
            debian_mirror(&text, deb822)
        })
        .next()
        .context(
            "no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d/*.{list,sources} \
             (a `deb` entry whose URI ends in /debian or that is signed by the Debian archive \
             keyring, security suites aside): add one, e.g. \
             `deb http://deb.debian.org/debian bookworm main` to /etc/apt/sources.list",
        )
}

/// One source entry: (URI, suites, signed-by).
type Entry = (String, Vec<String>, String);

/// The first Debian mirror among a sources file's `deb` entries, in the
/// one-line format or deb822 (`.sources`).
fn debian_mirror(text: &str, deb822: bool) -> Option<String> {
    let entries = if deb822 {
        deb822_entries(text)
    } else {
        one_line_entries(text)
    };
    entries.into_iter().find_map(|(uri, suites, signed_by)| {
        let uri = uri.trim_end_matches('/').to_string();
        let web = uri.starts_with("http://") || uri.starts_with("https://");
        let security =
            uri.ends_with("-security") || suites.iter().any(|s| s.ends_with("-security"));
        let debian = uri.ends_with("/debian") || signed_by.contains("debian-archive");
        (web && debian && !security).then_some(uri)
    })
}

/// `deb [opt=v ...] uri suite [component...]` lines.
fn one_line_entries(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next()?.trim();
            let rest = line.strip_prefix("deb ")?.trim_start();
            let (options, rest) = match rest.strip_prefix('[') {
                Some(r) => r.split_once(']')?,
                None => ("", rest),
            };
            let mut words = rest.split_whitespace();
            let uri = words.next()?.to_string();
            let suite = words.next()?.to_string();
            let signed_by = options
                .split_whitespace()
                .find_map(|o| o.strip_prefix("signed-by="))
                .unwrap_or("")
                .to_string();
            Some((uri, vec![suite], signed_by))
        })
        .collect()
}

/// deb822 stanzas with `Types: deb` that are not `Enabled: no`, one entry
/// per URI.
fn deb822_entries(text: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| -> String {
            stanza
                .lines()
                .filter(|l| !l.starts_with('#') && !l.starts_with(char::is_whitespace))
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default()
        };
        if !field("Types").split_whitespace().any(|t| t == "deb")
            || field("Enabled").eq_ignore_ascii_case("no")
        {
            continue;
        }
        let suites: Vec<String> = field("Suites")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let signed_by = field("Signed-By");
        for uri in field("URIs").split_whitespace() {
            entries.push((uri.to_string(), suites.clone(), signed_by.clone()));
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_from_deb822_sources() {
        let text = "Types: deb\n\
            # http://snapshot.debian.org/archive/debian-security/20250520T000000Z\n\
            URIs: http://deb.debian.org/debian-security\n\
            Suites: bookworm-security\n\
            Components: main\n\
            Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\
            \n\
            Types: deb-src deb\n\
            URIs: http://ftp.de.debian.org/debian/\n\
            Suites: bookworm bookworm-updates\n\
            Components: main\n";
        assert_eq!(
            debian_mirror(text, true).as_deref(),
            Some("http://ftp.de.debian.org/debian")
        );
        let disabled =
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nEnabled: no\n";
        assert_eq!(debian_mirror(disabled, true), None);
    }

    #[test]
    fn mirror_from_one_line_sources() {
        let text = "# deb http://old.example/debian bookworm main\n\
            deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n\
            deb http://security.debian.org/debian-security bookworm-security main\n\
            deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
            http://snapshot.debian.org/archive/debian/20250520T000000Z bookworm main\n";
        assert_eq!(
            debian_mirror(text, false).as_deref(),
            Some("http://snapshot.debian.org/archive/debian/20250520T000000Z")
        );
        assert_eq!(
            debian_mirror(
                "deb-src http://deb.debian.org/debian bookworm main\n",
                false
            ),
            None
        );
    }

    #[test]
    fn split_image_parts_from_depends() {
        let show = "Package: linux-image-7.2.13+deb14-amd64\n\
            Version: 7.2.13-1\n\
            Depends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, \
            linux-base-7.2.13+deb14-amd64 (= 7.2.13-1), linux-binary-7.2.13+deb14-amd64 (= 7.2.13-1), \
            linux-modules-7.2.13+deb14-amd64 (= 7.2.13-1)\n";
        let parts = split_parts("linux-image-7.2.13+deb14-amd64", show);
        let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "linux-base-7.2.13+deb14-amd64",
                "linux-binary-7.2.13+deb14-amd64",
                "linux-modules-7.2.13+deb14-amd64"
            ]
        );
        assert!(parts.iter().all(|(_, v)| v.as_deref() == Some("7.2.13-1")));
        // Debian 12's single package depends on the unrelated `linux-base`.
        let single = "Depends: kmod, linux-base (>= 4.3~), initramfs-tools (>= 0.120+deb8u2)\n";
        assert!(split_parts("linux-image-6.12.117+deb12-amd64-unsigned", single).is_empty());
    }
}
