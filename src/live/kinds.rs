//! Which API resource serves a kind (`apps/v1` `Deployment` -> `deployments`), found by API
//! discovery once per kind and then remembered: kinds do not move while the controller runs,
//! and without the cache every lookup would cost a discovery request.

use std::collections::BTreeMap;
use std::sync::Mutex;

use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::pinned_kind;
use kube::Client;

pub struct KindResources {
    client: Client,
    known: Mutex<BTreeMap<(String, String), ApiResource>>,
}

impl KindResources {
    pub fn new(client: Client) -> KindResources {
        KindResources { client, known: Mutex::default() }
    }

    /// The resource of `kind` in `api_version` (`v1`, `apps/v1`, ...).
    pub async fn resource(&self, api_version: &str, kind: &str) -> Result<ApiResource, kube::Error> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(r) = self.lock().get(&key) {
            return Ok(r.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let (resource, _) = pinned_kind(&self.client, &GroupVersionKind::gvk(group, version, kind)).await?;
        self.lock().insert(key, resource.clone());
        Ok(resource)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), ApiResource>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}
