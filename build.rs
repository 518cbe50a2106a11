//! Relinks the binary when the list of the idle loop's functions changes: the package's build
//! links through `packaging/link-idle-first`, which reads that list, and cargo cannot see a
//! linker's inputs by itself.

fn main() {
    println!("cargo::rerun-if-changed=packaging/idle-functions.txt");
    println!("cargo::rerun-if-changed=packaging/link-idle-first");
}
