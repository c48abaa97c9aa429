/* The counter-based draw of dropout (docs/ir.md), one definition for the
   reference interpreter (philox.cpp compiles this file) and for kernels (their
   prelude holds its text: kiln::ir::philoxCppSource()). KILN_SYM_FN marks it
   host and device code under CUDA (sym::cppPrelude() defines it).

   Philox-4x32-10 with key `seed` (low word first) and `counter` in the low two
   of the four counter words; the uniform draw in [0, 1) is the top 24 bits of
   the first output word over 2^24. */
KILN_SYM_FN double kiln_philox_uniform(uint64_t seed, uint64_t counter) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (double)(c0 >> 8) * (1.0 / 16777216.0);
}
