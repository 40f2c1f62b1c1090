package ledger

// FullPathOnly turns off Append's optimistic step on s, so tests can hold
// both ways through appendTx to the same rules.
func FullPathOnly(s *Store) { s.fullPathOnly = true }
