//! The router's state, [`AppState`]: the [`Registry`] of every model (`models/`), the
//! metrics, the server's config, the count of requests in flight, and whether the server is
//! ready or draining. What one model is served with is `core/served.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::config::ServerConfig;
use crate::core::error::ApiError;
use crate::core::served::ServedModel;
use crate::http::in_flight::InFlight;
use crate::http::metrics::Metrics;
use crate::models::{ModelsConfig, Registry};

/// The router's state: the models, the metrics (which exist from the start, so requests
/// during loading are counted) and the config.
#[derive(Clone)]
pub struct AppState {
    pub models: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    pub config: Arc<ServerConfig>,
    /// Whole requests being answered: what a graceful shutdown waits for.
    pub in_flight: Arc<InFlight>,
    /// Set once the default model has loaded at start: `/health` answers 503 until then.
    ready: Arc<AtomicBool>,
    /// Set on the shutdown signal: `/health` answers 503 from then on, so a load balancer
    /// takes the replica out while its in-flight requests finish.
    draining: Arc<AtomicBool>,
}

impl AppState {
    /// A state with no model yet: `/health` answers 503 until [`Self::set_ready`], and so
    /// does every model route until a model is added to [`Self::models`] (the registry
    /// answers 503 while it holds none).
    pub fn new(config: ServerConfig, models: ModelsConfig) -> AppState {
        let config = Arc::new(config);
        let metrics = Arc::new(Metrics::default());
        AppState {
            models: Registry::new(models, Arc::clone(&config), Arc::clone(&metrics)),
            metrics,
            config,
            in_flight: Arc::default(),
            ready: Arc::new(AtomicBool::new(false)),
            draining: Arc::new(AtomicBool::new(false)),
        }
    }

    /// [`Self::new`] with the default models config.
    pub fn loading(config: ServerConfig) -> AppState {
        AppState::new(config, ModelsConfig::default())
    }

    /// The default model is up: `/health` answers 200.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The shutdown signal came (`server.rs`): no longer ready for new work.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The default model's version serving now (tests and status lines; requests go
    /// through [`crate::models::Pinned`]).
    pub fn served(&self) -> Result<Arc<ServedModel>, ApiError> {
        self.models.get(None).ok_or(ApiError::Loading)
    }
}
