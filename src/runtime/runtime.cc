// Placeholder until the runtime layer lands.
