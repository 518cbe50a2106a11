//! `pilotd completions SHELL`: prints a shell completion script generated from the same clap
//! definition the parser uses, so completions always match the flags of this very binary.
//! The Debian package ships the bash, zsh and fish scripts; other shells can redirect this
//! command's output to wherever they load completions from.

use super::CmdError;
use crate::cli::{Cli, CompletionsArgs};
use clap::CommandFactory;

/// The script for `args.shell`, ready to print.
pub fn run(args: &CompletionsArgs) -> Result<String, CmdError> {
    let mut cmd = Cli::command();
    // The name the script registers must be the command the user types, not whatever the
    // binary happened to be called when the script was generated (target/debug/pilotd).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "pilotd", &mut script);
    String::from_utf8(script).map_err(|e| {
        CmdError::Runtime(format!(
            "completion script for {} is not UTF-8: {e}",
            args.shell
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap_complete::Shell;

    #[test]
    fn every_shipped_shell_gets_a_script_naming_pilotd_and_its_subcommands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = run(&CompletionsArgs { shell }).expect("script");
            assert!(script.contains("pilotd"), "{shell}: no pilotd in script");
            // A subcommand and a global flag: the script follows the real CLI.
            assert!(
                script.contains("schedule"),
                "{shell}: no schedule subcommand"
            );
            assert!(script.contains("policy"), "{shell}: no --policy flag");
        }
    }

    #[test]
    fn bash_script_registers_the_pilotd_command() {
        let script = run(&CompletionsArgs { shell: Shell::Bash }).expect("script");
        assert!(script.contains("complete -F _pilotd"), "{script}");
    }
}
