//! The `pilotd` binary: parse arguments, call into the library, map errors to exit codes.
//! No `#[tokio::main]`: `run --daemon` must fork before any runtime exists.

use clap::Parser;
use pilotd::cli::{Cli, Command};
use pilotd::cmd::{self, CmdError};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let g = &cli.global;
    let result: Result<String, CmdError> = match &cli.command {
        Command::Check => cmd::check::run(g),
        Command::Plan(a) => cmd::plan::run(g, a),
        Command::Snapshot => cmd::snapshot::run(g),
        Command::Schedule(a) => cmd::schedule::run(g, a),
        Command::ImportIni(a) => cmd::import_ini::run(a),
        Command::Init(a) => cmd::init::run(g, a),
        Command::Completions(a) => cmd::completions::run(a),
        Command::Manpages(a) => cmd::manpages::run(a),
        Command::Run(a) => cmd::run::run(g, a),
        Command::Status(a) => cmd::status::run(g, a),
        Command::Gc(a) => cmd::gc::run(g, a),
        Command::Failsafe(a) => cmd::failsafe::run(g, a),
        Command::Snooze(a) => cmd::snooze::run(g, a),
        Command::Resume => cmd::resume::run(g),
        Command::Open => cmd::open::run(g),
    };
    match result {
        Ok(out) => {
            // A closed pipe (`pilotd plan | head`) is not an error worth a panic.
            let _ = std::io::stdout().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pilotd: {}", redact::credentials(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}
