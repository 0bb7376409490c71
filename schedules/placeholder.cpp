// placeholder until the schedules land
