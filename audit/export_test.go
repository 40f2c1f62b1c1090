package audit

// ParseStrict and ParseWritten are ParseExportLine's two ways, for the
// fuzz test that holds them to the same rows.
var (
	ParseStrict  = parseStrict
	ParseWritten = parseWritten
)
