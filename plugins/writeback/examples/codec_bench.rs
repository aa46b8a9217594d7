//! Encode and decode throughput of the two Reed-Solomon crates at write-back's geometries, one
//! core, side by side: `cargo run --release -p floe-writeback --example codec_bench`. Prints a
//! Markdown table (object MiB per second of one core).
#![allow(clippy::print_stdout)]

use std::error::Error;
use std::time::Instant;

use reed_solomon_erasure::galois_8::ReedSolomon;

const TOTAL: usize = 256 << 20;

type Res<T> = Result<T, Box<dyn Error>>;

fn data(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761) as u8)
        .collect()
}

fn simd(k: usize, m: usize, stripe: usize) -> Res<(f64, f64)> {
    let len = stripe.div_ceil(k).next_multiple_of(2);
    let shards: Vec<Vec<u8>> = (0..k).map(|i| data(len + i)[i..].to_vec()).collect();
    let rounds = TOTAL / stripe;
    let mut enc = reed_solomon_simd::ReedSolomonEncoder::new(k, m, len)?;
    let t = Instant::now();
    let mut recovery = Vec::new();
    for _ in 0..rounds {
        for s in &shards {
            enc.add_original_shard(s)?;
        }
        let r = enc.encode()?;
        recovery = r.recovery_iter().map(<[u8]>::to_vec).collect();
    }
    let e = TOTAL as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64;
    // Decode with the first m data shards lost (the worst case: all parity used).
    let mut dec = reed_solomon_simd::ReedSolomonDecoder::new(k, m, len)?;
    let t = Instant::now();
    for _ in 0..rounds {
        for (i, s) in shards.iter().enumerate().skip(m) {
            dec.add_original_shard(i, s)?;
        }
        for (i, r) in recovery.iter().enumerate() {
            dec.add_recovery_shard(i, r)?;
        }
        let out = dec.decode()?;
        if out.restored_original(0).is_none() {
            return Err("shard 0 not restored".into());
        }
    }
    let d = TOTAL as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64;
    Ok((e, d))
}

fn erasure(k: usize, m: usize, stripe: usize) -> Res<(f64, f64)> {
    let len = stripe.div_ceil(k);
    let rs = ReedSolomon::new(k, m).map_err(|e| format!("{e:?}"))?;
    let mut shards: Vec<Vec<u8>> = (0..k + m).map(|i| data(len + i)[i..].to_vec()).collect();
    let rounds = TOTAL / stripe;
    let t = Instant::now();
    for _ in 0..rounds {
        rs.encode(&mut shards).map_err(|e| format!("{e:?}"))?;
    }
    let e = TOTAL as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64;
    let t = Instant::now();
    for _ in 0..rounds {
        let mut some: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
        for s in some.iter_mut().take(m) {
            *s = None;
        }
        rs.reconstruct_data(&mut some)
            .map_err(|e| format!("{e:?}"))?;
    }
    let d = TOTAL as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64;
    Ok((e, d))
}

fn main() -> Res<()> {
    println!("| geometry | stripe | crate | encode MiB/s | decode (m lost) MiB/s |");
    println!("|---|---:|---|---:|---:|");
    for (k, m) in [(4, 2), (8, 4)] {
        for mib in [1, 2, 4] {
            let stripe = mib << 20;
            let (se, sd) = simd(k, m, stripe)?;
            let (ee, ed) = erasure(k, m, stripe)?;
            println!("| {k}+{m} | {mib} MiB | reed-solomon-simd 3.1 | {se:.0} | {sd:.0} |");
            println!("| {k}+{m} | {mib} MiB | reed-solomon-erasure 6 | {ee:.0} | {ed:.0} |");
        }
    }
    Ok(())
}
