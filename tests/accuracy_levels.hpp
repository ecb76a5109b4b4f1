
namespace linattn::testing {

// The tensor-core kernel splits each 16-bit-rounded operand (the state and the
// scores) into hi + lo parts; what remains is u16^2 relative per split operand.
inline double tensor_core_split_level(DType input) {
  const double u = unit_roundoff(input);
  return 2 * u * u;
}

}  // namespace linattn::testing
