// The unit trident_torch_pch builds its precompiled header with (NOTE [torch precompiled header]).
