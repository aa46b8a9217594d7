//! The client-matrix program for the AWS SDK for Rust (`aws-sdk-s3`), at its default settings
//! but for a custom endpoint and path-style addressing. Same protocol as ../go/main.go:
//!
//! ```text
//! s3check write|read ENDPOINT BUCKET PREFIX DIR
//! ```

use std::error::Error;
use std::path::Path;

use aws_sdk_s3::primitives::ByteStream;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, endpoint, bucket, prefix, dir] = args.as_slice() else {
        return Err("usage: s3check write|read ENDPOINT BUCKET PREFIX DIR".into());
    };
    let shared = aws_config::from_env()
        .region("us-east-1")
        .endpoint_url(endpoint)
        .load()
        .await;
    let conf = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(true)
        .build();
    let c = aws_sdk_s3::Client::from_conf(conf);
    let dir = Path::new(dir);
    if mode == "write" {
        for name in ["small", "big"] {
            let body = ByteStream::from_path(dir.join(format!("{name}.bin"))).await?;
            c.put_object()
                .bucket(bucket)
                .key(format!("{prefix}/{name}"))
                .body(body)
                .send()
                .await?;
        }
        return Ok(());
    }
    let out = dir.join("out");
    tokio::fs::create_dir_all(&out).await?;
    for (name, range) in [("big", None), ("range", Some("bytes=1000-2999"))] {
        let got = c
            .get_object()
            .bucket(bucket)
            .key(format!("{prefix}/big"))
            .set_range(range.map(str::to_owned))
            .send()
            .await?;
        let bytes = got.body.collect().await?.into_bytes();
        tokio::fs::write(out.join(name), bytes).await?;
    }
    let listed = c
        .list_objects_v2()
        .bucket(bucket)
        .prefix(format!("{prefix}/"))
        .send()
        .await?;
    let mut lines = String::new();
    for o in listed.contents() {
        lines += &format!("{} {}\n", o.key().unwrap_or(""), o.size().unwrap_or(-1));
    }
    tokio::fs::write(out.join("list"), lines).await?;
    let h = c
        .head_object()
        .bucket(bucket)
        .key(format!("{prefix}/small"))
        .send()
        .await?;
    let head = format!(
        "{} {}\n",
        h.content_length().unwrap_or(-1),
        h.e_tag().unwrap_or("")
    );
    tokio::fs::write(out.join("head"), head).await?;
    Ok(())
}
