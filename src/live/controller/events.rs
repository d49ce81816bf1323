//! Events (`events.k8s.io/v1`) about the jobs colocate steers, one series per distinct message.
//!
//! kube-runtime's `Recorder` keys a series by object, reason and action only and patches the
//! first Event of the series on every repeat, so `kubectl describe` kept showing the first
//! decision (`Shrink (x4) 21 -> 20 workers`) while the latest were 15 -> 12 and 14 -> 21; the
//! API server will not change an Event's note either. Here the note is part of the key, as in
//! client-go's event recorder: the same decision repeated counts up one Event, a new decision is
//! a new Event, and the newest Event always says what the controller did last.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Mutex;

/// A series older than this starts afresh (client-go and kube-runtime use 6 minutes).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

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

pub struct EventWriter {
    client: Client,
    controller: String,
    instance: String,
    series: Mutex<HashMap<Key, Series>>,
}

impl EventWriter {
    pub fn new(client: Client, controller: &str, instance: &str) -> EventWriter {
        EventWriter {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            series: Mutex::new(HashMap::new()),
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
        let mut series = self.series.lock().await;
        let ttl = k8s_openapi::jiff::SignedDuration::try_from(SERIES_TTL).expect("6 minutes fit");
        series.retain(|_, s| s.last + ttl > now);
        if let Some(s) = series.get_mut(&key) {
            let api: Api<Event> = Api::namespaced(self.client.clone(), &s.namespace);
            let patch = json!({"series": EventSeries { count: s.count + 1, last_observed_time: MicroTime(now) }});
            api.patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            s.count += 1;
            s.last = now;
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
        series.insert(key, Series { name, namespace, count: 1, last: now });
        Ok(())
    }
}
