fn main() {
    std::process::exit(saltpeter::ctl::main());
}
