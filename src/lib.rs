//! The `pilotd` binary: the command line and one file per subcommand, the edge above both modes.

pub mod cli;
pub mod cmd;
