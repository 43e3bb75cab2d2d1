//! Chat templates: the Jinja template a GGUF file carries in
//! `tokenizer.chat_template`, rendered with `minijinja` the way Hugging
//! Face's `apply_chat_template` (and llama.cpp's `--jinja`) render it:
//! `trim_blocks` and `lstrip_blocks` on, loop controls, Python string and
//! dict methods (`.strip()`, `.startswith()`, `.items()` ...), `tojson`,
//! `raise_exception(msg)` and `strftime_now(fmt)`; the variables `messages`
//! (`role`, `content`), `add_generation_prompt`, `bos_token` and
//! `eos_token`.
//!
//! A template comes from a file, so it is untrusted: rendering runs on a
//! fuel budget (a template that loops for ever is an error, not a hang),
//! with a recursion limit, and every failure is an [`Error`] naming the
//! template's line.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use minijinja::value::Value;
use minijinja::{Environment, ErrorKind};
use tessera::{Error, Result};
use tessera_gguf::GgufFile;

/// Instructions a rendering may execute (a long multi-turn conversation
/// through a large template takes well under a million).
const FUEL: u64 = 50_000_000;
/// Longest template accepted, in bytes.
const MAX_TEMPLATE: usize = 1 << 20;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant` (templates may know others, e.g. `tool`).
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message of `role` saying `content`.
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// A parsed chat template with its special-token strings.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The time `strftime_now` reads, in seconds after the epoch (UTC); 0:
    /// the system clock.
    clock: Arc<AtomicU64>,
    bos: String,
    eos: String,
}

impl ChatTemplate {
    /// Parse `source`; `bos` and `eos` are the texts of the vocabulary's
    /// BOS and EOS tokens (empty when it has none).
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate> {
        if source.len() > MAX_TEMPLATE {
            return Err(Error::InvalidLayout(format!(
                "chat template of {} bytes (at most {MAX_TEMPLATE})",
                source.len()
            )));
        }
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error("configuring", &e))?;
        env.set_syntax(syntax);
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(100);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        let clock = Arc::new(AtomicU64::new(0));
        let now = clock.clone();
        env.add_function("strftime_now", move |fmt: String| {
            let fixed = now.load(Ordering::Relaxed);
            let secs = if fixed != 0 {
                fixed
            } else {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            };
            format_date(&fmt, secs)
        });
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| template_error("parsing", &e))?;
        Ok(ChatTemplate {
            env,
            clock,
            bos: bos.to_string(),
            eos: eos.to_string(),
        })
    }

    /// The template of `file` (`tokenizer.chat_template`) with the texts of
    /// its BOS/EOS tokens, or `None` when the file has no template.
    pub fn from_gguf(file: &GgufFile) -> Result<Option<ChatTemplate>> {
        let Ok(source) = file.get::<&str>("tokenizer.chat_template") else {
            return Ok(None);
        };
        let token = |key: &str| -> String {
            let Ok(id) = file.get::<u32>(key) else {
                return String::new();
            };
            file.get::<Vec<&str>>("tokenizer.ggml.tokens")
                .ok()
                .and_then(|t| t.get(id as usize).map(|s| s.to_string()))
                .unwrap_or_default()
        };
        let (bos, eos) = (
            token("tokenizer.ggml.bos_token_id"),
            token("tokenizer.ggml.eos_token_id"),
        );
        ChatTemplate::new(source, &bos, &eos).map(Some)
    }

    /// Make `strftime_now` (today's date, which some templates print) read
    /// `unix_secs` instead of the system clock (UTC): reproducible prompts.
    pub fn set_clock(&self, unix_secs: u64) {
        self.clock.store(unix_secs.max(1), Ordering::Relaxed);
    }

    /// The text of `messages`, followed by the assistant's turn header when
    /// `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let msgs: Vec<Value> = messages
            .iter()
            .map(|m| {
                Value::from(BTreeMap::from([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ]))
            })
            .collect();
        let ctx = Value::from(BTreeMap::from([
            ("messages", Value::from(msgs)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("bos_token", Value::from(self.bos.as_str())),
            ("eos_token", Value::from(self.eos.as_str())),
        ]));
        let t = self
            .env
            .get_template("chat")
            .map_err(|e| template_error("loading", &e))?;
        t.render(ctx).map_err(|e| template_error("rendering", &e))
    }
}

/// `raise_exception(msg)`: the template refuses the conversation.
fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

/// `strftime_now(fmt)`'s result: `fmt` with `%Y %m %d %b %B %H %M %S %%` replaced for the UTC time `secs`
/// after the epoch; other directives are kept as they are.
fn format_date(fmt: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = (secs / 86_400) as i64;
    let tod = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let month = MONTHS[(m - 1).clamp(0, 11) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('b') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('H') => out.push_str(&format!("{:02}", tod / 3600)),
            Some('M') => out.push_str(&format!("{:02}", tod / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", tod % 60)),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

fn template_error(what: &str, e: &minijinja::Error) -> Error {
    let line = e.line().map(|l| format!(" (line {l})")).unwrap_or_default();
    let detail = e.detail().map(|d| format!(": {d}")).unwrap_or_default();
    Error::InvalidLayout(format!(
        "chat template: {what} failed{line}: {}{detail}",
        e.kind()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_dates() {
        // 2026-11-25 12:34:56 UTC.
        let t = 1_795_610_096;
        assert_eq!(format_date("%Y-%m-%d %H:%M:%S", t), "2026-11-25 12:34:56");
        assert_eq!(format_date("%d %b %Y", t), "25 Nov 2026");
        assert_eq!(format_date("%B %% %q", t), "November % %q");
        assert_eq!(format_date("%Y-%m-%d", 951_782_400), "2000-02-29");
    }

    #[test]
    fn hostile_templates_are_errors() {
        let m = [Message::new("user", "hi")];
        // An endless loop runs out of fuel.
        let t = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        assert!(t.render(&m, true).is_err());
        // Unbounded recursion stops at the limit.
        let t = ChatTemplate::new(
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "",
            "",
        )
        .unwrap();
        assert!(t.render(&m, true).is_err());
        // Syntax errors name the line.
        let e = ChatTemplate::new("ok\n{% if %}", "", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
        // raise_exception is an error with the template's message.
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
        let e = t.render(&m, true).unwrap_err().to_string();
        assert!(e.contains("no system role"), "{e}");
    }
}
