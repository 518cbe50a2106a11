//! The volunteer daemon: the tokio reconcile loop.
