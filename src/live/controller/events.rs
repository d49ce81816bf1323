//! Events (`events.k8s.io/v1`) about the jobs colocate steers, one series per distinct message.
//!
//! kube-runtime's `Recorder` keys a series by object, reason and action only and patches the
//! first Event of the series on every repeat, so `kubectl describe` would keep showing the
//! first decision (`Shrink (x4) 21 -> 20 workers`) while the latest are 15 -> 12 and 14 -> 21;
//! the API server will not change an Event's note either. Here the note is part of the key, as
//! in client-go's event recorder: the same decision repeated counts up one Event, a new
//! decision is a new Event, and the newest Event always says what the controller did last.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Mutex;

/// A series older than this starts afresh (client-go and kube-runtime use 6 minutes).
const SERIES_TTL: SignedDuration = SignedDuration::from_secs(6 * 60);

/// What one Event says.
pub struct EventNote<'a> {
    pub regarding: &'a ObjectReference,
    pub warning: bool,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
}

#[derive(Clone, Hash, PartialEq, Eq)]
struct Key {
    regarding: (Option<String>, Option<String>, Option<String>, Option<String>),
    warning: bool,
    reason: String,
    action: String,
    note: String,
}

struct Series {
    name: String,
    namespace: String,
    count: i32,
    last: Timestamp,
}

/// The series this writer started, by key. Pure: says what a publish must write.
#[derive(Default)]
struct SeriesBook {
    series: HashMap<Key, Series>,
}

/// What to write for one publish.
#[derive(Debug, PartialEq)]
enum Next {
    Create,
    /// Count the existing Event up to `count`.
    Count {
        name: String,
        namespace: String,
        count: i32,
    },
}

impl SeriesBook {
    fn next(&mut self, key: &Key, now: Timestamp) -> Next {
        self.series.retain(|_, s| s.last + SERIES_TTL > now);
        match self.series.get(key) {
            Some(s) => Next::Count { name: s.name.clone(), namespace: s.namespace.clone(), count: s.count + 1 },
            None => Next::Create,
        }
    }

    /// Records what was written: a new Event (`count` 1) or a count.
    fn written(&mut self, key: Key, name: String, namespace: String, count: i32, now: Timestamp) {
        self.series.insert(key, Series { name, namespace, count, last: now });
    }
}

pub struct EventWriter {
    client: Client,
    controller: String,
    instance: String,
    book: Mutex<SeriesBook>,
}

impl EventWriter {
    pub fn new(client: Client, controller: &str, instance: &str) -> EventWriter {
        EventWriter {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            book: Mutex::new(SeriesBook::default()),
        }
    }

    /// Creates the Event, or counts it up if the same note was published within the TTL.
    pub async fn publish(&self, e: &EventNote<'_>) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let r = e.regarding;
        let key = Key {
            regarding: (r.api_version.clone(), r.kind.clone(), r.namespace.clone(), r.name.clone()),
            warning: e.warning,
            reason: e.reason.to_string(),
            action: e.action.to_string(),
            note: e.note.to_string(),
        };
        let mut book = self.book.lock().await;
        if let Next::Count { name, namespace, count } = book.next(&key, now) {
            let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
            let patch = json!({"series": EventSeries { count, last_observed_time: MicroTime(now) }});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            book.written(key, name, namespace, count, now);
            return Ok(());
        }
        let namespace = r.namespace.clone().unwrap_or_else(|| "default".to_string());
        let name = format!("{}.{:x}", r.name.as_deref().unwrap_or(&self.controller), now.as_nanosecond());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(if e.warning { "Warning" } else { "Normal" }.to_string()),
            reason: Some(e.reason.to_string()),
            action: Some(e.action.to_string()),
            note: Some(e.note.to_string()),
            regarding: Some(r.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace).create(&PostParams::default(), &event).await?;
        // Counting starts at 1; the first repeat makes a series of 2, as the events API expects.
        book.written(key, name, namespace, 1, now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(note: &str) -> Key {
        Key {
            regarding: (Some("v1".into()), Some("Service".into()), Some("ml".into()), Some("m".into())),
            warning: false,
            reason: "Shrink".into(),
            action: "Scale".into(),
            note: note.into(),
        }
    }

    #[test]
    fn a_repeated_decision_counts_up_and_a_new_one_is_a_new_event() {
        let t0 = Timestamp::from_second(1_000_000).unwrap();
        let at = |s: i64| t0 + SignedDuration::from_secs(s);
        let mut book = SeriesBook::default();
        let first = key("21 -> 20 workers");
        assert_eq!(book.next(&first, at(0)), Next::Create);
        book.written(first.clone(), "m.1".into(), "ml".into(), 1, at(0));
        let counted = Next::Count { name: "m.1".into(), namespace: "ml".into(), count: 2 };
        assert_eq!(book.next(&first, at(10)), counted);
        book.written(first.clone(), "m.1".into(), "ml".into(), 2, at(10));
        // The latest decision has other numbers: its own Event, so `kubectl describe` shows it.
        assert_eq!(book.next(&key("15 -> 12 workers"), at(20)), Next::Create);
        // Six minutes after the last repeat the series is over: the same note starts afresh.
        assert_eq!(book.next(&first, at(10 + 361)), Next::Create);
    }
}
