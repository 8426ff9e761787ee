// Placeholder until the io layer lands.
