//! The HTTP server (to come).
