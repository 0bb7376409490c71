// placeholder until layout lands
