// DWARF line tables and inlined frames of Rust, built with
// rustc -g -C opt-level=2 by build.sh.
use std::hint::black_box;

#[inline(never)]
pub fn record(v: u64) -> u64 {
    black_box(v) ^ 5
}

#[inline(always)]
fn area(side: u64) -> u64 {
    record(side * side)
}

#[inline(never)]
pub fn measure(side: u64) -> u64 {
    area(side) + record(2)
}

fn main() {
    let n = std::env::args().count() as u64;
    println!("{}", measure(black_box(n)));
}
