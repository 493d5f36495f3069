//! GID table queries through libibverbs, sysfs fallback. Owned by the verbs work.
