//! `saltpeter-wrapper`: runs one Saltpeter job on this host (see `saltpeter::wrapper`).

fn main() -> std::process::ExitCode {
    saltpeter::wrapper::main()
}
