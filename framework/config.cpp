// placeholder until config lands
