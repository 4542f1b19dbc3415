//! What a binary watches: one call per watched kind for its store, its first-list signal and
//! its events, backed off after errors and ended at shutdown ([`watch`]); the first list done,
//! for any number of waiters ([`listed`]); the metadata every compact cached object keeps
//! ([`compact`]); one shared copy of each distinct value among many cached objects
//! ([`interned`]); a store's objects grouped by node or namespace ([`index`]).

pub mod compact;
pub mod index;
pub mod interned;
pub mod listed;
pub mod watch;
