//! `agentaddress attachment TASK EVENT_ID ATTACHMENT_ID [--out FILE]`: downloads one attachment
//! of an email event (docs/API.md §11) into a new file, 0600, never overwriting one.
//!
//! Without `--out` the file goes into the current directory under the attachment's name. That
//! name comes from the mail's sender: it is reduced to a plain file name here (whatever the
//! server did), so it can never leave the directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use agentaddress_core::domain::ids::is_valid_id;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::error::{CliError, Result};
use super::{connect, ServerArg};

#[derive(Debug, clap::Args)]
pub struct AttachmentArgs {
    /// Task name (as given to `create`).
    task: String,
    /// The email event's id (`evt_…`).
    event_id: String,
    /// The attachment's id (`att_…`, from the event's `data.attachments`).
    attachment_id: String,
    /// Write to FILE (which must not exist) instead of a new file named after the attachment
    /// in the current directory.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    #[command(flatten)]
    server: ServerArg,
}

/// The largest download accepted (the server's raw message limit is at most 100 MiB).
const MAX_BYTES: usize = 100 * 1024 * 1024;

pub async fn attachment(args: AttachmentArgs, secret: &mut Option<String>) -> Result<Value> {
    for (what, id) in [
        ("event", &args.event_id),
        ("attachment", &args.attachment_id),
    ] {
        if !is_valid_id(id) {
            return Err(CliError::new(
                "invalid_request",
                format!("an {what} id is 1 to 64 of the characters A-Z a-z 0-9 _ -"),
            ));
        }
    }
    let (_, saved, api) = connect(&args.task, &args.server, secret)?;
    let download = api
        .download(
            &format!(
                "addresses/{}/events/{}/attachments/{}",
                saved.address_id, args.event_id, args.attachment_id
            ),
            &saved.read_token,
            MAX_BYTES,
        )
        .await?;
    let filename = download
        .disposition
        .as_deref()
        .and_then(disposition_filename)
        .map(|name| agentaddress_email::sanitize_filename(&name))
        .unwrap_or_else(|| "attachment".to_owned());
    let path = match args.out {
        Some(path) => path,
        None => Path::new(".").join(plain_name(&filename)),
    };
    write_new(&path, &download.bytes)?;
    Ok(json!({
        "file": path.display().to_string(),
        "filename": filename,
        "size": download.bytes.len(),
        "sha256": hex::encode(Sha256::digest(&download.bytes)),
        "content_type": download.content_type,
    }))
}

/// `filename` as one path component: no separator, not `.` or `..`, not empty.
fn plain_name(filename: &str) -> String {
    let base = filename
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or_default()
        .trim_matches(|c: char| c.is_whitespace() || c.is_control());
    let base: String = base.chars().filter(|c| !c.is_control()).collect();
    if base.is_empty() || base.chars().all(|c| c == '.') {
        "attachment".to_owned()
    } else {
        base
    }
}

/// The `filename*=UTF-8''…` (RFC 8187) or `filename="…"` of a `Content-Disposition` value.
fn disposition_filename(value: &str) -> Option<String> {
    let mut plain = None;
    for param in value.split(';').map(str::trim) {
        let Some((name, v)) = param.split_once('=') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "filename*" => {
                let (charset, rest) = v.split_once('\'')?;
                let (_, encoded) = rest.split_once('\'')?;
                if !charset.eq_ignore_ascii_case("utf-8") {
                    return None;
                }
                return String::from_utf8(percent_decode(encoded)?).ok();
            }
            "filename" => plain = Some(v.trim_matches('"').to_owned()),
            _ => {}
        }
    }
    plain
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Creates `path` (it must not exist), 0600 on Unix, and writes `bytes` to it; a partly written
/// file is removed.
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            CliError::new(
                "file_exists",
                format!(
                    "{} exists and is never overwritten: choose another --out",
                    path.display()
                ),
            )
        } else {
            CliError::new(
                "output_error",
                format!("cannot create {}: {e}", path.display()),
            )
        }
    })?;
    if let Err(e) = file.write_all(bytes).and_then(|()| file.sync_all()) {
        let _ = std::fs::remove_file(path);
        return Err(CliError::new(
            "output_error",
            format!("cannot write {}: {e}", path.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_in_the_directory() {
        assert_eq!(plain_name("report.pdf"), "report.pdf");
        assert_eq!(plain_name("../../etc/passwd"), "passwd");
        assert_eq!(plain_name("..\\..\\boot.ini"), "boot.ini");
        assert_eq!(plain_name(".."), "attachment");
        assert_eq!(plain_name("dir/"), "attachment");
        assert_eq!(plain_name(""), "attachment");
        assert_eq!(plain_name("a\u{0}b\nc"), "abc");
    }

    #[test]
    fn dispositions() {
        assert_eq!(
            disposition_filename("attachment; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf").as_deref(),
            Some("r\u{e9}sum\u{e9}.pdf")
        );
        assert_eq!(
            disposition_filename("attachment; filename=\"a.txt\"").as_deref(),
            Some("a.txt")
        );
        assert_eq!(
            disposition_filename("attachment; filename*=UTF-8''%ZZ"),
            None
        );
        assert_eq!(disposition_filename("attachment"), None);
    }
}
