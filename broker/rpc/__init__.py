"""The gRPC shell: servicers that check, convert and hand over; error mapping once."""
