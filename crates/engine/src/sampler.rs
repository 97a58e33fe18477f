//! Samplers (filled in by the scheduler work item).
