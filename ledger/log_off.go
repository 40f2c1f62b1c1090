//go:build tally_nolog

package ledger

// logOff: this build keeps no log (see log_on.go); for make bench only.
const logOff = true
