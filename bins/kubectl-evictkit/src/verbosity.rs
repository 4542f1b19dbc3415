//! kubectl's `-v LEVEL`, on stderr in klog's form, so the lines read as kubectl's do:
//! `I1206 08:31:02.123456 evictkit_drain] "Asked" pod="shop/web-0" ...`. From 4, the debug
//! events of evictkit's crates (the drain's decisions, see [`evictkit_drain`]); from 6, a
//! `"Response"` line per API call, from the span kube's client opens around each (its verb,
//! URL and status) and the time from its start to its end (the body read). No level prints
//! headers or bodies, which kube's client does not trace.

use std::fmt;
use std::io::Write as _;
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// From this level, what the drain decides (kubectl's commands say their own steps at 4).
const DECISIONS: u8 = 4;
/// From this level, each API call (kubectl's "Response" lines).
const CALLS: u8 = 6;
/// The name kube's client gives the span of each API call.
const CALL_SPAN: &str = "HTTP";
/// Where the events of the drain's decisions come from.
const OURS: [&str; 4] = [
    "kubectl_evictkit",
    "evictkit_drain",
    "evictkit_runtime",
    "evictkit_commands",
];

/// Whether `level` logs anything at all.
pub fn logs(level: u8) -> bool {
    level >= DECISIONS
}

/// Installs the logger of `level` for the process; below 4 none, so nothing is traced.
pub fn init(level: u8) {
    if !logs(level) {
        return;
    }
    // Nothing else in this binary installs a subscriber: this cannot find one in place.
    let _ = tracing_subscriber::registry()
        .with(Klog::new(std::io::stderr).with_filter(targets(level)))
        .try_init();
}

/// What `level` logs: nothing below 4 (an empty `Targets` enables nothing).
fn targets(level: u8) -> Targets {
    if !logs(level) {
        return Targets::new();
    }
    let ours = OURS.iter().fold(Targets::new(), |t, target| {
        t.with_target(*target, Level::DEBUG)
    });
    if level >= CALLS {
        ours.with_target("kube_client", Level::DEBUG)
    } else {
        ours
    }
}

/// Writes events and API calls as klog lines.
struct Klog<W> {
    out: W,
}

impl<W> Klog<W> {
    fn new(out: W) -> Self {
        Self { out }
    }
}

impl<W: for<'w> MakeWriter<'w> + 'static> Klog<W> {
    fn write(&self, level: Level, source: &str, text: &str) {
        let severity = match level {
            Level::ERROR => 'E',
            Level::WARN => 'W',
            _ => 'I',
        };
        let time = jiff::Zoned::now().strftime("%m%d %H:%M:%S%.6f");
        // A closed stderr has nowhere to say it either.
        let _ = writeln!(self.out.make_writer(), "{severity}{time} {source}] {text}");
    }
}

/// An API call under way: what kube's span says of it, and since when.
struct Call {
    verb: String,
    url: String,
    status: Option<u16>,
    /// Why it has no status: the error kube's client logged in its span.
    failure: Option<String>,
    start: Instant,
}

impl Call {
    /// kubectl's line for a call (its round tripper's at -v=6).
    fn line(&self, milliseconds: u128) -> String {
        let status = match (self.status, &self.failure) {
            (Some(code), _) => http::StatusCode::from_u16(code)
                .map_or_else(|_| code.to_string(), |status| status.to_string()),
            (None, Some(failure)) => failure.clone(),
            (None, None) => "no answer".to_owned(),
        };
        format!(
            "\"Response\" verb={:?} url={:?} status={status:?} milliseconds={milliseconds}",
            self.verb, self.url
        )
    }
}

impl<S, W> Layer<S> for Klog<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != CALL_SPAN {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Call {
                verb: fields.value("http.method"),
                url: fields.value("http.url"),
                status: None,
                failure: None,
                start: Instant::now(),
            });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        let Some(call) = extensions.get_mut::<Call>() else {
            return;
        };
        let mut fields = Fields::default();
        values.record(&mut fields);
        if let Ok(status) = fields.value("http.status_code").parse() {
            call.status = Some(status);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let metadata = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        if metadata.target().starts_with("kube_client") {
            // Of kube's own events only a failed call's error is said, on the call's line.
            if *metadata.level() == Level::ERROR
                && let Some(span) = ctx.event_span(event)
                && let Some(call) = span.extensions_mut().get_mut::<Call>()
            {
                call.failure = Some(fields.message.clone());
            }
            return;
        }
        self.write(*metadata.level(), metadata.target(), &fields.line());
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let extensions = span.extensions();
        if let Some(call) = extensions.get::<Call>() {
            let line = call.line(call.start.elapsed().as_millis());
            self.write(Level::INFO, "request", &line);
        }
    }
}

/// An event's or span's fields: its message, then each other field as klog's `key="value"`
/// (numbers and booleans bare).
#[derive(Default)]
struct Fields {
    message: String,
    pairs: Vec<(&'static str, String, bool)>,
}

impl Fields {
    /// The text of field `name`, empty when absent.
    fn value(&self, name: &str) -> String {
        self.pairs
            .iter()
            .find(|(field, _, _)| *field == name)
            .map(|(_, value, _)| value.clone())
            .unwrap_or_default()
    }

    fn line(&self) -> String {
        let mut line = format!("{:?}", self.message);
        for (name, value, quoted) in &self.pairs {
            if *quoted {
                line.push_str(&format!(" {name}={value:?}"));
            } else {
                line.push_str(&format!(" {name}={value}"));
            }
        }
        line
    }

    fn push(&mut self, field: &Field, value: String, quoted: bool) {
        if field.name() == "message" {
            self.message = value;
        } else {
            self.pairs.push((field.name(), value, quoted));
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, format!("{value:?}"), true);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value.to_owned(), true);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, value.to_string(), false);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, value.to_string(), false);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, value.to_string(), false);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What the logger wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .expect("not poisoned")
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Captured {
        type Writer = Self;

        fn make_writer(&'w self) -> Self {
            self.clone()
        }
    }

    /// The lines logged at `level` while `traced` runs.
    fn logged(level: u8, traced: impl FnOnce()) -> Vec<String> {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::registry()
            .with(Klog::new(captured.clone()).with_filter(targets(level)));
        tracing::subscriber::with_default(subscriber, traced);
        let bytes = captured.0.lock().expect("not poisoned").clone();
        String::from_utf8(bytes)
            .expect("UTF-8")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// An API call as kube's client traces it (its span's name, target and fields).
    fn call(status: Option<u16>) {
        let span = tracing::debug_span!(
            target: "kube_client::client::builder",
            "HTTP",
            http.method = %"GET",
            http.url = %"https://127.0.0.1:6443/api/v1/nodes/n",
            http.status_code = tracing::field::Empty,
        );
        let _entered = span.enter();
        tracing::debug!(target: "kube_client::client::builder", "requesting");
        match status {
            Some(status) => {
                span.record("http.status_code", status);
            }
            None => {
                tracing::error!(target: "kube_client::client::builder", "failed with error connection refused");
            }
        }
    }

    fn decision() {
        tracing::debug!(target: "evictkit_drain", pod = %"shop/web-0", through = "Eviction API", "Asked");
    }

    #[test]
    fn each_level_logs_what_kubectl_logs_at_it() {
        let both = || {
            decision();
            call(Some(200));
        };
        assert!(logged(0, both).is_empty());
        assert!(logged(3, both).is_empty());
        let decisions = logged(4, both);
        assert_eq!(decisions.len(), 1, "{decisions:?}");
        assert!(
            decisions[0].starts_with('I')
                && decisions[0].ends_with(
                    " evictkit_drain] \"Asked\" pod=\"shop/web-0\" through=\"Eviction API\""
                ),
            "{decisions:?}"
        );
        for level in [6, 8] {
            let calls = logged(level, both);
            assert_eq!(calls.len(), 2, "{calls:?}");
            assert!(
                calls[1].contains(
                    " request] \"Response\" verb=\"GET\" url=\"https://127.0.0.1:6443/api/v1/nodes/n\" status=\"200 OK\" milliseconds="
                ),
                "{calls:?}"
            );
        }
    }

    #[test]
    fn a_call_without_an_answer_says_why() {
        let lines = logged(6, || call(None));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("status=\"failed with error connection refused\""),
            "{lines:?}"
        );
    }

    #[test]
    fn lines_start_with_klogs_header() {
        let lines = logged(4, decision);
        // I MMDD HH:MM:SS.micro
        let header = &lines[0][..22];
        let digits = header.chars().enumerate().all(|(i, c)| match i {
            0 => c == 'I',
            5 => c == ' ',
            8 | 11 => c == ':',
            14 => c == '.',
            21 => c == ' ',
            _ => c.is_ascii_digit(),
        });
        assert!(digits, "{header:?} in {lines:?}");
    }
}
