fn main() {
    std::process::exit(saltpeter::daemon::main());
}
