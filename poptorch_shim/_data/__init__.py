"""The asynchronous loader: PopTorch's DataLoader and AsynchronousDataAccessor, the
worker process that fills a shared-memory ring buffer, and what they share."""
