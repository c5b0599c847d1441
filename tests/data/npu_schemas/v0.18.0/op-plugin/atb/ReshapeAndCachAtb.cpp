TORCH_LIBRARY_FRAGMENT(atb, m)
{
    m.def("_npu_reshape_and_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor slot_indices) -> ()");
}
