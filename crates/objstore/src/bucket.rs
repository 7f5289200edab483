//! Opening the bucket that object-storage mode writes to (being built).
