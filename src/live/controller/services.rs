//! The online services: the configured ones, or, when none is configured, one per HPA in the
//! cluster. A service given by its HPA is made of the pods of the HPA's scale target: their
//! selector is read from the target's `/scale` subresource (`status.selector`), which every
//! scalable kind (Deployment, StatefulSet, CRDs) exposes the same way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::DynamicObject;
use kube::{Api, Client};

use crate::live::config::ServiceSource;
use crate::live::kinds::KindResources;
use crate::live::names::object_key;
use crate::live::sampler::ServiceReading;
use crate::live::selector::LabelSelector;
use crate::live::view::OnlineService;

/// A resolved selector is re-read this often (a Deployment's selector is immutable, but the
/// HPA may be pointed at another target).
const SELECTOR_TTL: Duration = Duration::from_secs(300);

/// Bound on reading one scale target's selector (API discovery of its kind and its `/scale`).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A read that timed out is tried again this soon, rather than after [`SELECTOR_TTL`]: the API
/// server was slow, not the target wrong.
const TIMED_OUT_RETRY: Duration = Duration::from_secs(30);

/// The scale target an HPA points at.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    namespace: String,
    api_version: String,
    kind: String,
    name: String,
}

struct Resolved {
    selector: Result<LabelSelector, String>,
    /// When it is read again.
    until: Instant,
}

pub struct ServiceDirectory {
    configured: Vec<ServiceSource>,
    client: Client,
    selectors: Mutex<BTreeMap<Target, Resolved>>,
    /// Shared with the decision recorder: one discovery request per kind.
    kinds: Arc<KindResources>,
}

impl ServiceDirectory {
    pub fn new(client: Client, configured: Vec<ServiceSource>, kinds: Arc<KindResources>) -> ServiceDirectory {
        ServiceDirectory { configured, kinds, client, selectors: Mutex::new(BTreeMap::new()) }
    }

    /// The services as `ServiceSource`s: configured, or one per HPA (named after it).
    fn sources(&self, hpas: &[Arc<HorizontalPodAutoscaler>]) -> Vec<ServiceSource> {
        if !self.configured.is_empty() {
            return self.configured.clone();
        }
        hpas.iter()
            .map(|h| ServiceSource {
                name: h.metadata.name.clone().unwrap_or_default(),
                namespace: h.metadata.namespace.clone().unwrap_or_default(),
                hpa: h.metadata.name.clone(),
                selector: None,
                slo_p99: None,
                load: None,
                latency_p99: None,
                headroom_replicas: 0,
            })
            .collect()
    }

    /// Reads the selectors of scale targets not resolved yet (or resolved too long ago).
    /// Called before building a snapshot; normally a no-op. Each read is bounded by
    /// [`RESOLVE_TIMEOUT`]: an API server that does not answer delays a decision by that much
    /// at most, and the services of that target are reported as unresolved until the retry.
    pub async fn resolve(&self, hpas: &[Arc<HorizontalPodAutoscaler>]) {
        let mut wanted: BTreeMap<Target, Vec<String>> = BTreeMap::new();
        for s in self.sources(hpas) {
            if let Some(t) = target_of(&s, hpas) {
                wanted.entry(t).or_default().push(object_key(&s.namespace, &s.name));
            }
        }
        let missing: Vec<(Target, Vec<String>)> = {
            let cache = self.lock();
            wanted.into_iter().filter(|(t, _)| cache.get(t).is_none_or(|r| Instant::now() > r.until)).collect()
        };
        for (target, services) in missing {
            let (selector, ttl) = match tokio::time::timeout(RESOLVE_TIMEOUT, self.read_selector(&target)).await {
                Ok(read) => (read, SELECTOR_TTL),
                Err(_) => {
                    let e = format!(
                        "{} {}/{} /scale: no answer from the API server within {RESOLVE_TIMEOUT:?}",
                        target.kind, target.namespace, target.name
                    );
                    (Err(e), TIMED_OUT_RETRY)
                }
            };
            if let Err(e) = &selector {
                tracing::warn!(services = ?services, namespace = %target.namespace, kind = %target.kind,
                    name = %target.name, error = %e,
                    "cannot read the scale target's selector; its pods are not counted as online");
            }
            self.lock().insert(target, Resolved { selector, until: Instant::now() + ttl });
        }
    }

    async fn read_selector(&self, t: &Target) -> Result<LabelSelector, String> {
        let resource =
            self.kinds.resource(&t.api_version, &t.kind).await.map_err(|e| format!("kind {}: {e}", t.kind))?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &t.namespace, &resource);
        let scale =
            api.get_scale(&t.name).await.map_err(|e| format!("{} {}/{} /scale: {e}", t.kind, t.namespace, t.name))?;
        let text = scale.status.and_then(|s| s.selector).unwrap_or_default();
        if text.is_empty() {
            return Err(format!("{} {}/{} reports no selector on /scale", t.kind, t.namespace, t.name));
        }
        LabelSelector::parse(&text).map_err(|e| e.problem)
    }

    /// The services with their selectors and readings, and what could not be resolved.
    pub fn services(
        &self,
        hpas: &[Arc<HorizontalPodAutoscaler>],
        readings: &BTreeMap<String, ServiceReading>,
    ) -> (Vec<OnlineService>, Vec<String>) {
        let cache = self.lock();
        let mut problems = Vec::new();
        let services = self
            .sources(hpas)
            .into_iter()
            .map(|s| {
                let key = object_key(&s.namespace, &s.name);
                let selector = match (&s.selector, target_of(&s, hpas)) {
                    (Some(text), _) => LabelSelector::parse(text).ok(),
                    (None, Some(t)) => match cache.get(&t).map(|r| &r.selector) {
                        Some(Ok(sel)) => Some(sel.clone()),
                        Some(Err(e)) => {
                            problems.push(format!("service {key}: {e}"));
                            None
                        }
                        None => None,
                    },
                    (None, None) => None,
                };
                let reading = readings.get(&key).cloned().unwrap_or_default();
                OnlineService {
                    namespace: s.namespace,
                    name: s.name,
                    selector,
                    hpa: s.hpa,
                    slo_p99: s.slo_p99,
                    headroom_replicas: s.headroom_replicas,
                    load: reading.load,
                    p99: reading.p99,
                }
            })
            .collect();
        (services, problems)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Target, Resolved>> {
        self.selectors.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The scale target of a service's HPA, when it has one and the HPA exists.
fn target_of(s: &ServiceSource, hpas: &[Arc<HorizontalPodAutoscaler>]) -> Option<Target> {
    let name = s.hpa.as_ref()?;
    let hpa = hpas.iter().find(|h| {
        h.metadata.namespace.as_deref() == Some(s.namespace.as_str()) && h.metadata.name.as_deref() == Some(name)
    })?;
    let r = &hpa.spec.as_ref()?.scale_target_ref;
    Some(Target {
        namespace: s.namespace.clone(),
        api_version: r.api_version.clone().unwrap_or_else(|| "apps/v1".into()),
        kind: r.kind.clone(),
        name: r.name.clone(),
    })
}
