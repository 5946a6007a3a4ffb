// overflow.rs: a Rust host for tests/hardening/stacks/check_rust.py.
//
// Rust's standard library gives every thread it starts an alternate signal
// stack and catches SIGSEGV there: a fault in a thread's guard page is
// reported as "thread '<name>' has overflowed its stack" before the
// process aborts (SIGABRT). Anything that pushes a signal frame onto the
// nearly full stack itself faults in the guard page where the kernel
// cannot report it: the process dies of a plain SIGSEGV, silently.
//
// usage: overflow overflow   once a line (or end of file) is read from
//                            stdin, a thread named "deep" (256 KiB stack)
//                            recurses until its stack overflows (Rust
//                            aborts); its last 16 KiB go slowly
//        overflow work       a thread named "worker" computes (recursion
//                            that stays shallow) until stdin ends, then
//                            the program exits 0
// (stdin: the test starts and stops the work when the agent is sampling,
// however slowly a loaded machine lets it start)
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const FRAME: usize = 512;
const STACK: usize = 256 * 1024;
// The stack's last bytes are taken slowly (a thread working with its stack
// nearly full): SLOW_MS per level in the last SLOW_ZONE bytes, SLOWER_MS
// in the last SLOWER_ZONE, where a signal frame no longer fits.
const SLOW_ZONE: usize = 16 * 1024;
const SLOW_MS: u64 = 40;
const SLOWER_ZONE: usize = 8 * 1024;
const SLOWER_MS: u64 = 100;

// glibc's, for the thread's stack bounds (no crate needed; pthread_attr_t
// is 56 bytes on x86-64 glibc)
extern "C" {
    fn pthread_self() -> usize;
    fn pthread_getattr_np(thread: usize, attr: *mut [u64; 8]) -> i32;
    fn pthread_attr_getstack(attr: *const [u64; 8], addr: *mut usize, size: *mut usize) -> i32;
    fn pthread_attr_destroy(attr: *mut [u64; 8]) -> i32;
}

// the lowest address of the calling thread's stack (its guard page below)
fn stack_low() -> usize {
    let mut attr = [0u64; 8];
    let (mut lo, mut size) = (0usize, 0usize);
    unsafe {
        if pthread_getattr_np(pthread_self(), &mut attr) != 0 {
            panic!("pthread_getattr_np");
        }
        let r = pthread_attr_getstack(&attr, &mut lo, &mut size);
        pthread_attr_destroy(&mut attr);
        assert!(r == 0 && size > 0, "pthread_attr_getstack");
    }
    lo
}

fn spin(ms: u64, mut x: u64) -> u64 {
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end {
        for _ in 0..1000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        }
    }
    x
}

// One level: a frame of FRAME bytes and a little work, running all the way
// down (the agent signals running threads); `low` is the stack's end.
#[inline(never)]
fn down(depth: u64, above: &[u8; FRAME], low: usize) -> u64 {
    let mut here = [0u8; FRAME];
    let mut x = depth ^ above[(depth as usize) % FRAME] as u64;
    for i in 0..FRAME {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        here[i] = (x >> 33) as u8;
    }
    let left = (&here as *const _ as usize).wrapping_sub(low);
    if left < SLOWER_ZONE {
        x = spin(SLOWER_MS, x);
    } else if left < SLOW_ZONE {
        x = spin(SLOW_MS, x);
    }
    if depth == u64::MAX {
        return x; // never: a way out the compiler cannot rule out
    }
    let r = down(depth + 1, &here, low);
    // read after the call: no tail call, the frame stays
    r.wrapping_add(unsafe { std::ptr::read_volatile(&here[(x as usize) % FRAME]) } as u64)
}

#[inline(never)]
fn shallow(depth: u32, seed: u64) -> u64 {
    let mut x = seed;
    for _ in 0..2000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(depth as u64);
    }
    if depth == 0 {
        x
    } else {
        shallow(depth - 1, x) ^ x.rotate_left(7)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(|s| s.as_str()) {
        Some("overflow") => {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            println!("overflow: start");
            let t = thread::Builder::new()
                .name("deep".into())
                .stack_size(STACK)
                .spawn(|| down(0, &[1u8; FRAME], stack_low()))
                .expect("spawn");
            let r = t.join();
            // not reached: Rust aborts the process on the overflow
            println!("overflow: thread returned {}", r.is_ok());
        }
        Some("work") => {
            let stop = Arc::new(AtomicBool::new(false));
            let seen = stop.clone();
            let t = thread::Builder::new()
                .name("worker".into())
                .spawn(move || {
                    let (mut acc, mut n) = (0u64, 0u64);
                    while !seen.load(Ordering::Relaxed) {
                        acc ^= shallow(64, n);
                        n += 1;
                    }
                    (acc, n)
                })
                .expect("spawn");
            let mut rest = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut rest);
            stop.store(true, Ordering::Relaxed);
            let (acc, n) = t.join().expect("worker");
            println!("work: done {} rounds {:x}", n, acc);
        }
        _ => {
            eprintln!("usage: overflow overflow | work");
            std::process::exit(2);
        }
    }
}
