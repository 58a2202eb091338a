//! Shell completions and the man page, generated from the CLI definition itself, so
//! they can never disagree with the verbs.
//!
//! `saltpeterctl completions bash|zsh|fish` prints a completion script;
//! `saltpeterctl manpage` prints `saltpeterctl(1)` in roff, or with `--dir DIR` writes
//! it and one page per verb (`saltpeterctl-run.1`, ...) into DIR.

use std::path::Path;

use clap::CommandFactory;

use super::args::Cli;
use super::exit::{CtlResult, EXIT_FAILED, EXIT_OK};

pub(super) fn completions(shell: clap_complete::Shell) -> CtlResult {
    let mut cmd = Cli::command();
    // Into memory first: clap_complete panics on a write error (`| head`).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "saltpeterctl", &mut script);
    super::out::bytes(&script);
    Ok(EXIT_OK)
}

fn render(cmd: clap::Command, out: &mut impl std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(cmd).render(out)
}

pub(super) fn manpage(dir: Option<&Path>) -> CtlResult {
    let err = |e: std::io::Error| (EXIT_FAILED, format!("could not write the man page: {e}"));
    let cmd = Cli::command();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        render(cmd, &mut page).map_err(err)?;
        super::out::bytes(&page);
        return Ok(EXIT_OK);
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        (
            EXIT_FAILED,
            format!("could not create {}: {e}", dir.display()),
        )
    })?;
    let mut written = vec![dir.join("saltpeterctl.1")];
    let mut buf = Vec::new();
    render(cmd.clone(), &mut buf).map_err(err)?;
    std::fs::write(&written[0], buf).map_err(err)?;
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() {
            continue;
        }
        let name = format!("saltpeterctl-{}", sub.get_name());
        let page = sub
            .clone()
            .display_name(name.clone())
            .bin_name(format!("saltpeterctl {}", sub.get_name()));
        let mut buf = Vec::new();
        render(page, &mut buf).map_err(err)?;
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, buf).map_err(err)?;
        written.push(path);
    }
    for path in &written {
        outln!("{}", path.display());
    }
    Ok(EXIT_OK)
}
