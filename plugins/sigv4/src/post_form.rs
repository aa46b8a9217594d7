//! The fields of a browser form upload (POST Object): `multipart/form-data` read from the
//! start of the body up to the `file` part, as S3 reads it (the fields after `file` are
//! ignored by S3; here the form must end right after the file, see [`trailer`]).
//!
//! Written here rather than with a multipart crate because the proxy needs what those hide:
//! the byte offset where the file's data starts, so the data can be forwarded as a PUT of a
//! length known before it streams.

use floe_core::{S3Error, S3ErrorCode};

/// The most bytes of fields before the file S3 reads (its limit is 20 KiB of fields; the
/// margin covers part headers).
pub const MAX_FIELDS_BYTES: usize = 64 * 1024;

/// The fields before the file, and where the file's data starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Form {
    /// (name lowercased, value) in the order sent.
    pub fields: Vec<(String, String)>,
    /// The file part's `filename`, if it named one.
    pub file_name: Option<String>,
    /// Offset of the file's first byte in the body.
    pub data_start: usize,
}

impl Form {
    /// The value of field `name` (case-insensitive, as S3 treats form field names).
    pub fn get(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The boundary of a `multipart/form-data` Content-Type; `None` for another type.
pub fn boundary(content_type: &str) -> Option<String> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        let v = v.trim().trim_matches('"');
        (k.trim().eq_ignore_ascii_case("boundary") && !v.is_empty() && v.len() <= 70)
            .then(|| v.to_owned())
    })
}

/// The bytes that end the body after the file's data.
pub fn trailer(boundary: &str) -> Vec<u8> {
    format!("\r\n--{boundary}--\r\n").into_bytes()
}

/// Parses the start of a body; `Ok(None)`: the file part has not begun yet, read more.
pub fn parse(buf: &[u8], boundary: &str) -> Result<Option<Form>, S3Error> {
    let delimiter = format!("--{boundary}");
    let Some(first) = find(buf, delimiter.as_bytes(), 0) else {
        return more(buf);
    };
    let mut at = first + delimiter.len();
    let mut fields = Vec::new();
    loop {
        if buf.len() < at + 2 {
            return more(buf);
        }
        if &buf[at..at + 2] == b"--" {
            return Err(malformed(
                "POST requires exactly one file upload per request.",
            ));
        }
        if &buf[at..at + 2] != b"\r\n" {
            return Err(malformed("a part boundary is not followed by CRLF"));
        }
        let head_start = at + 2;
        let Some(head_end) = find(buf, b"\r\n\r\n", head_start) else {
            return more(buf);
        };
        let head = std::str::from_utf8(&buf[head_start..head_end])
            .map_err(|_| malformed("a part's headers are not UTF-8"))?;
        let (name, file_name) = disposition(head)?;
        let data_start = head_end + 4;
        if name.eq_ignore_ascii_case("file") {
            return Ok(Some(Form {
                fields,
                file_name,
                data_start,
            }));
        }
        let close = format!("\r\n{delimiter}");
        let Some(value_end) = find(buf, close.as_bytes(), data_start) else {
            return more(buf);
        };
        let value = std::str::from_utf8(&buf[data_start..value_end])
            .map_err(|_| malformed("a form field is not UTF-8"))?;
        fields.push((name.to_ascii_lowercase(), value.to_owned()));
        at = value_end + close.len();
    }
}

/// Read more, unless the fields already take more room than S3 reads.
fn more(buf: &[u8]) -> Result<Option<Form>, S3Error> {
    if buf.len() > MAX_FIELDS_BYTES {
        return Err(S3Error::new(
            S3ErrorCode::MaxPostPreDataLengthExceededError,
            "Your POST request fields preceeding the upload file was too large.",
        ));
    }
    Ok(None)
}

/// The `name` and `filename` of a part's `Content-Disposition: form-data; ...` header.
fn disposition(head: &str) -> Result<(String, Option<String>), S3Error> {
    let value = head
        .split("\r\n")
        .find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-disposition")
                .then_some(v)
        })
        .ok_or_else(|| malformed("a part has no Content-Disposition"))?;
    let mut name = None;
    let mut file_name = None;
    for param in value.split(';').skip(1) {
        let Some((k, v)) = param.trim().split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"').to_owned();
        match k.trim().to_ascii_lowercase().as_str() {
            "name" => name = Some(v),
            "filename" => file_name = Some(v),
            _ => {}
        }
    }
    let name = name.ok_or_else(|| malformed("a part has no name"))?;
    Ok((name, file_name))
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

fn malformed(why: &str) -> S3Error {
    S3Error::new(
        S3ErrorCode::MalformedPOSTRequest,
        format!("The body of your POST request is not well-formed multipart/form-data: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: &str = "----floe7MA4YWxk";

    fn body(fields: &[(&str, &str)], file: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in fields {
            let part =
                format!("--{B}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n");
            out.extend_from_slice(part.as_bytes());
        }
        let head = format!("--{B}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\n");
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(file);
        out.extend_from_slice(&trailer(B));
        out
    }

    #[test]
    fn reads_the_fields_and_where_the_file_starts() {
        let b = body(
            &[
                ("key", "up/${filename}"),
                ("Policy", "eyJ9"),
                ("x-amz-meta-a", "1\r\n2"),
            ],
            b"hello",
        );
        let form = parse(&b, B).unwrap().unwrap();
        assert_eq!(form.get("KEY"), Some("up/${filename}"));
        assert_eq!(form.get("policy"), Some("eyJ9"));
        assert_eq!(form.get("x-amz-meta-a"), Some("1\r\n2"));
        assert_eq!(form.file_name.as_deref(), Some("a.txt"));
        let data_end = b.len() - trailer(B).len();
        assert_eq!(&b[form.data_start..data_end], b"hello");
    }

    #[test]
    fn every_cut_before_the_file_asks_for_more() {
        let b = body(&[("key", "k"), ("policy", "p")], b"x");
        let form = parse(&b, B).unwrap().unwrap();
        for cut in 0..form.data_start {
            assert_eq!(parse(&b[..cut], B).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn refuses_a_form_without_a_file_and_oversized_fields() {
        let no_file = format!(
            "--{B}\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--{B}--\r\n"
        );
        let e = parse(no_file.as_bytes(), B).unwrap_err();
        assert_eq!(e.code, S3ErrorCode::MalformedPOSTRequest);
        let huge = body(&[("key", &"k".repeat(MAX_FIELDS_BYTES))], b"x");
        let cut = &huge[..MAX_FIELDS_BYTES + 10];
        assert_eq!(
            parse(cut, B).unwrap_err().code,
            S3ErrorCode::MaxPostPreDataLengthExceededError
        );
    }

    #[test]
    fn finds_the_boundary_of_form_data_only() {
        assert_eq!(
            boundary("multipart/form-data; boundary=abc").as_deref(),
            Some("abc")
        );
        assert_eq!(
            boundary("Multipart/Form-Data; charset=x; boundary=\"a b\"").as_deref(),
            Some("a b")
        );
        assert_eq!(boundary("multipart/mixed; boundary=abc"), None);
        assert_eq!(boundary("multipart/form-data"), None);
    }
}
