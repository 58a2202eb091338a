//! `saltpeter-executor-ssh`: the ssh executor plugin (src/executor/ssh/), run by
//! saltpeter-daemon once per operation.

fn main() -> std::process::ExitCode {
    saltpeter::executor::sdk::main(saltpeter::executor::ssh::SshExecutor)
}
