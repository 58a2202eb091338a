fn main() {
    std::process::exit(saltpeter::cleanup::main());
}
