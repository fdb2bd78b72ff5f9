package descriptors

// OrderOf returns the block order an Order field ([Layout.Order],
// [Geometry.Order]) names, with "" (the zero value) as OrderHND, so that
// two fields compare as orders.
func OrderOf(order string) string {
	if order == "" {
		return OrderHND
	}
	return order
}
