//! The scheduler (filled in by the scheduler work item).
